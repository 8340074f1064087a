package fakeprovider

import "net/http"

// renderOpenAIResponses is a placeholder until this protocol's renderer is written.
func renderOpenAIResponses(w http.ResponseWriter, r *http.Request, body []byte, t Turn) {
	http.Error(w, "fakeprovider: protocol not rendered yet", http.StatusNotImplemented)
}
