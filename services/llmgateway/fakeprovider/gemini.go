package fakeprovider

import "net/http"

// renderGemini is a placeholder until this protocol's renderer is written.
func renderGemini(w http.ResponseWriter, r *http.Request, body []byte, t Turn) {
	http.Error(w, "fakeprovider: protocol not rendered yet", http.StatusNotImplemented)
}
