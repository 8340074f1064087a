package compat

import (
	"net/http"
	"strconv"
	"time"

	llmv1 "github.com/fabro-sh/fabro-go/gen/fabro/llm/v1"
)

// catalogEpoch stands in for a model's creation time, which the catalog
// does not record; both APIs require one.
var catalogEpoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

type openaiModel struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

type anthropicModelInfo struct {
	ID          string `json:"id"`
	Type        string `json:"type"`
	DisplayName string `json:"display_name"`
	CreatedAt   string `json:"created_at"`
}

func canonical(m *llmv1.Model) string { return m.GetProviderId() + "/" + m.GetModelId() }

func (h *Handler) models(r *http.Request) ([]*llmv1.Model, error) {
	// Every page: the compatible APIs list all models at once.
	var all []*llmv1.Model
	for tok := ""; ; {
		resp, err := h.backend.ListModels(r.Context(), &llmv1.ListModelsRequest{PageSize: 1000, PageToken: tok})
		if err != nil {
			return nil, err
		}
		all = append(all, resp.GetModels()...)
		if tok = resp.GetNextPageToken(); tok == "" {
			return all, nil
		}
	}
}

func (h *Handler) openaiModels(w http.ResponseWriter, r *http.Request) {
	ms, err := h.models(r)
	if err != nil {
		h.writeOpenAIBackendError(w, r, err)
		return
	}
	data := make([]openaiModel, 0, len(ms))
	for _, m := range ms {
		data = append(data, openaiModel{ID: canonical(m), Object: "model", Created: catalogEpoch.Unix(), OwnedBy: m.GetProviderId()})
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

// resolve finds a model by any selector the gateway accepts.
func (h *Handler) resolve(r *http.Request) (*llmv1.Model, error) {
	res, err := h.backend.ResolveModel(r.Context(), &llmv1.ResolveModelRequest{Selector: r.PathValue("id")})
	if err != nil {
		return nil, err
	}
	return res.GetModel(), nil
}

func (h *Handler) openaiModel(w http.ResponseWriter, r *http.Request) {
	m, err := h.resolve(r)
	if err != nil {
		h.writeOpenAIBackendError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, openaiModel{ID: canonical(m), Object: "model", Created: catalogEpoch.Unix(), OwnedBy: m.GetProviderId()})
}

func anthropicInfo(m *llmv1.Model) anthropicModelInfo {
	name := m.GetDisplayName()
	if name == "" {
		name = m.GetModelId()
	}
	return anthropicModelInfo{ID: canonical(m), Type: "model", DisplayName: name, CreatedAt: catalogEpoch.Format(time.RFC3339)}
}

// anthropicModels pages as Anthropic does: limit (1-1000, default 20),
// after_id or before_id, with has_more, first_id and last_id.
func (h *Handler) anthropicModels(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := 20
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			writeAnthropicError(w, http.StatusBadRequest, "invalid_request_error", "limit: Input should be an integer between 1 and 1000")
			return
		}
		limit = n
	}
	ms, err := h.models(r)
	if err != nil {
		h.writeAnthropicBackendError(w, r, err)
		return
	}
	find := func(id string) int {
		for i, m := range ms {
			if canonical(m) == id {
				return i
			}
		}
		return -1
	}
	lo, hi := 0, len(ms)
	if id := q.Get("after_id"); id != "" {
		i := find(id)
		if i < 0 {
			writeAnthropicError(w, http.StatusBadRequest, "invalid_request_error", "after_id: unknown model "+id)
			return
		}
		lo = i + 1
	}
	if id := q.Get("before_id"); id != "" {
		i := find(id)
		if i < 0 {
			writeAnthropicError(w, http.StatusBadRequest, "invalid_request_error", "before_id: unknown model "+id)
			return
		}
		hi = i
		if q.Get("after_id") == "" {
			lo = max(0, hi-limit)
		}
	}
	page := ms[lo:max(lo, hi)]
	hasMore := false
	if len(page) > limit {
		page, hasMore = page[:limit], true
	} else if q.Get("before_id") != "" && lo > 0 {
		hasMore = true
	}
	data := make([]anthropicModelInfo, 0, len(page))
	for _, m := range page {
		data = append(data, anthropicInfo(m))
	}
	body := map[string]any{"data": data, "has_more": hasMore, "first_id": nil, "last_id": nil}
	if len(data) > 0 {
		body["first_id"], body["last_id"] = data[0].ID, data[len(data)-1].ID
	}
	writeJSON(w, http.StatusOK, body)
}

func (h *Handler) anthropicModel(w http.ResponseWriter, r *http.Request) {
	m, err := h.resolve(r)
	if err != nil {
		h.writeAnthropicBackendError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, anthropicInfo(m))
}
