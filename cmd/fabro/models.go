package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
	"github.com/fabro-sh/fabro-go/services/llmgateway"
)

// probeBeforeStore probes every provider that reads the credential name
// with value, and refuses to store a key no provider accepts. A name no
// provider uses (a tool's token) is stored without a probe.
func probeBeforeStore(ctx context.Context, name, value, overlay string, e env) error {
	ctx, cancel := context.WithTimeout(ctx, 45*time.Second)
	defer cancel()
	res, err := llmgateway.ProbeCredential(ctx, llmgateway.Config{CatalogOverlay: overlay, LookupEnv: e.lookupEnv, MaxAttempts: 1}, name, value,
		slog.New(slog.DiscardHandler))
	if err != nil {
		return fmt.Errorf("probe %s: %w", name, err)
	}
	var failed []string
	for _, r := range res {
		fmt.Fprintf(e.stderr, "probe %s\n", r)
		if r.Err != nil {
			failed = append(failed, r.String())
		}
	}
	if len(res) > 0 && len(failed) == len(res) {
		return fmt.Errorf("%s not stored: the probe failed (%s); check the key, or store it anyway with --no-probe", name, strings.Join(failed, "; "))
	}
	return nil
}

func (c *clientFlags) llm(ctx context.Context) (llmv1.LLMGatewayServiceClient, context.Context, func(), error) {
	conn, ctx, done, err := c.connect(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	return llmv1.NewLLMGatewayServiceClient(conn), ctx, done, nil
}

// modelsCommand is `fabro models`: the catalog as a table.
func modelsCommand() *command {
	return &command{
		name: "models", summary: "list the model catalog (context, output limit, prices, capabilities)",
		examples: "  fabro models\n  fabro models --provider anthropic --all",
		define: func(fs *flag.FlagSet, e env) runner {
			c := newClientFlags(fs, e)
			provider := fs.String("provider", "", "only this provider's models")
			all := fs.Bool("all", false, "include disabled models")
			out := newOutputFlag(fs)
			return func(ctx context.Context, args []string) error {
				if len(args) > 0 {
					return usagef("models takes no arguments")
				}
				return listModels(ctx, c, out, *provider, *all, e)
			}
		},
	}
}

func listModels(ctx context.Context, c *clientFlags, out *outputFlag, provider string, all bool, e env) error {
	client, ctx, done, err := c.llm(ctx)
	if err != nil {
		return err
	}
	defer done()
	resp, err := allPages(func(tok string) (*llmv1.ListModelsResponse, error) {
		return client.ListModels(ctx, &llmv1.ListModelsRequest{ProviderId: provider, IncludeDisabled: all, PageSize: 1000, PageToken: tok})
	}, func(all, page *llmv1.ListModelsResponse) {
		all.Models = append(all.Models, page.GetModels()...)
	})
	if err != nil {
		return c.rpcError(err)
	}
	if out.json() {
		return out.print(e.stdout, resp)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MODEL\tALIASES\tCONTEXT\tOUTPUT\t$IN/M\t$OUT/M\tCAPABILITIES")
	for _, m := range resp.GetModels() {
		id := m.GetProviderId() + "/" + m.GetModelId()
		if m.GetDiscovered() {
			id += " (discovered)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", id, strings.Join(m.GetAliases(), ","),
			tokens(m.GetContextWindow()), tokens(m.GetMaxOutputTokens()),
			price(m.GetPricing().GetInputUsdMicrosPerMillion(), m.GetPricing() != nil),
			price(m.GetPricing().GetOutputUsdMicrosPerMillion(), m.GetPricing() != nil), capabilities(m.GetCapabilities()))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if d := resp.GetDefaultModel(); d != "" {
		fmt.Fprintf(e.stdout, "\ndefault %s, small %s, probe %s\n", d, resp.GetSmallModel(), resp.GetProbeModel())
	}
	for _, w := range resp.GetWarnings() {
		fmt.Fprintf(e.stderr, "warning: %s\n", w)
	}
	return nil
}

func tokens(n int64) string {
	switch {
	case n <= 0:
		return "-"
	case n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1000:
		return fmt.Sprintf("%dk", (n+500)/1000)
	}
	return fmt.Sprint(n)
}

func price(micros int64, known bool) string {
	if !known {
		return "-"
	}
	return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.3f", float64(micros)/1e6), "0"), ".")
}

func capabilities(c *llmv1.Capabilities) string {
	var out []string
	for _, f := range []struct {
		on   bool
		name string
	}{{c.GetTools(), "tools"}, {c.GetReasoning(), "reasoning"}, {c.GetVision(), "vision"}, {c.GetStructuredOutput(), "schema"}} {
		if f.on {
			out = append(out, f.name)
		}
	}
	if len(out) == 0 {
		return "-"
	}
	return strings.Join(out, ",")
}

// providersCommand is `fabro providers`: each provider and its readiness.
func providersCommand() *command {
	return &command{
		name: "providers", summary: "list the providers and whether each is ready (--probe checks with a call)",
		examples: "  fabro providers\n  fabro providers --probe",
		define: func(fs *flag.FlagSet, e env) runner {
			c := newClientFlags(fs, e)
			out := newOutputFlag(fs)
			probe := fs.Bool("probe", false, "probe each provider that has credentials with one small call")
			all := fs.Bool("all", false, "include disabled providers")
			return func(ctx context.Context, args []string) error {
				if len(args) > 0 {
					return usagef("providers takes no arguments")
				}
				return listProviders(ctx, c, out, *probe, *all, e)
			}
		},
	}
}

func listProviders(ctx context.Context, c *clientFlags, out *outputFlag, probe, all bool, e env) error {
	if probe && c.timeout < time.Minute {
		c.timeout = time.Minute // probes are real calls
	}
	client, ctx, done, err := c.llm(ctx)
	if err != nil {
		return err
	}
	defer done()
	resp, err := allPages(func(tok string) (*llmv1.ListProvidersResponse, error) {
		return client.ListProviders(ctx, &llmv1.ListProvidersRequest{Probe: probe, IncludeDisabled: all, PageSize: 1000, PageToken: tok})
	}, func(all, page *llmv1.ListProvidersResponse) {
		all.Providers = append(all.Providers, page.GetProviders()...)
		all.Readiness = append(all.Readiness, page.GetReadiness()...)
	})
	if err != nil {
		return c.rpcError(err)
	}
	if len(resp.GetReadiness()) != len(resp.GetProviders()) {
		return errors.New("the server reports no readiness: upgrade it")
	}
	if out.json() {
		return out.print(e.stdout, resp)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PROVIDER\tCODEC\tDEFAULT MODEL\tSTATE\tDETAIL")
	for i, p := range resp.GetProviders() {
		r := resp.GetReadiness()[i]
		state, detail := "", ""
		switch r.GetState() {
		case llmv1.ReadinessState_READINESS_STATE_READY:
			state = "ready"
			if r.GetProbed() {
				detail = "probed " + r.GetProbeModel()
			}
		case llmv1.ReadinessState_READINESS_STATE_MISSING_CREDENTIALS:
			state = "missing credentials"
			detail = "set " + strings.Join(r.GetMissingCredentials(), " or ") + " (fabro secret set " + r.GetMissingCredentials()[0] + ")"
		case llmv1.ReadinessState_READINESS_STATE_UNUSABLE:
			state, detail = "unusable", r.GetError().GetMessage()
		case llmv1.ReadinessState_READINESS_STATE_DISABLED:
			state = "disabled"
		case llmv1.ReadinessState_READINESS_STATE_UNREACHABLE:
			state, detail = "unreachable", r.GetError().GetMessage()
		}
		codec := strings.ToLower(strings.TrimPrefix(p.GetCodec().String(), "CODEC_"))
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", p.GetProviderId(), codec, p.GetDefaultModel(), state, detail)
	}
	return tw.Flush()
}
