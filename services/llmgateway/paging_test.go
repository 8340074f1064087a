package llmgateway

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
)

// TestListPagesAndGets pages ListModels and ListProviders one item at a
// time and checks the pages add up to the whole listing, and that
// GetModel and GetProvider return what the listings list.
func TestListPagesAndGets(t *testing.T) {
	client := dial(t, newGateway(t, newUpstream(t)))
	ctx := t.Context()

	whole, err := client.ListModels(ctx, &llmv1.ListModelsRequest{IncludeDisabled: true, PageSize: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if whole.GetNextPageToken() != "" || len(whole.GetModels()) < 3 {
		t.Fatalf("whole listing: %d models, next %q", len(whole.GetModels()), whole.GetNextPageToken())
	}
	var paged []*llmv1.Model
	for token := ""; ; {
		resp, err := client.ListModels(ctx, &llmv1.ListModelsRequest{IncludeDisabled: true, PageSize: 2, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.GetModels()) > 2 {
			t.Fatalf("a page of 2 holds %d", len(resp.GetModels()))
		}
		paged = append(paged, resp.GetModels()...)
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}
	if diff := cmp.Diff(whole.GetModels(), paged, protocmp.Transform()); diff != "" {
		t.Errorf("pages of ListModels (-whole +paged):\n%s", diff)
	}
	for _, m := range whole.GetModels() {
		got, err := client.GetModel(ctx, &llmv1.GetModelRequest{ProviderId: m.GetProviderId(), ModelId: m.GetModelId()})
		if err != nil {
			t.Fatalf("GetModel(%s/%s): %v", m.GetProviderId(), m.GetModelId(), err)
		}
		if diff := cmp.Diff(m, got.GetModel(), protocmp.Transform()); diff != "" {
			t.Errorf("GetModel(%s/%s) (-listed +got):\n%s", m.GetProviderId(), m.GetModelId(), diff)
		}
	}

	providers, err := client.ListProviders(ctx, &llmv1.ListProvidersRequest{IncludeDisabled: true})
	if err != nil {
		t.Fatal(err)
	}
	var pagedProviders []*llmv1.Provider
	var pagedReadiness []*llmv1.ProviderReadiness
	for token := ""; ; {
		resp, err := client.ListProviders(ctx, &llmv1.ListProvidersRequest{IncludeDisabled: true, PageSize: 1, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		pagedProviders = append(pagedProviders, resp.GetProviders()...)
		pagedReadiness = append(pagedReadiness, resp.GetReadiness()...)
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}
	if diff := cmp.Diff(providers.GetProviders(), pagedProviders, protocmp.Transform()); diff != "" {
		t.Errorf("pages of ListProviders (-whole +paged):\n%s", diff)
	}
	if diff := cmp.Diff(providers.GetReadiness(), pagedReadiness, protocmp.Transform()); diff != "" {
		t.Errorf("readiness over pages (-whole +paged):\n%s", diff)
	}
	for i, p := range providers.GetProviders() {
		got, err := client.GetProvider(ctx, &llmv1.GetProviderRequest{ProviderId: p.GetProviderId()})
		if err != nil {
			t.Fatalf("GetProvider(%s): %v", p.GetProviderId(), err)
		}
		want := &llmv1.GetProviderResponse{Provider: p, Readiness: providers.GetReadiness()[i]}
		if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
			t.Errorf("GetProvider(%s) (-listed +got):\n%s", p.GetProviderId(), diff)
		}
	}
}
