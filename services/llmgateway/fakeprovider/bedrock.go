package fakeprovider

import "net/http"

// renderBedrock is a placeholder until this protocol's renderer is written.
func renderBedrock(w http.ResponseWriter, r *http.Request, body []byte, t Turn) {
	http.Error(w, "fakeprovider: protocol not rendered yet", http.StatusNotImplemented)
}
