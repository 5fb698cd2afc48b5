package counters

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/rules"
)

// The endpoints' paths.
const (
	Path      = "/counters"
	ResetPath = "/counters/reset"
)

// ServeHTTP answers GET (or HEAD) Path and POST ResetPath, each with the
// query "domain=d&key=value&key2=value2": the first parameter named domain
// is the domain, every other one, in order, an entry of the descriptor.
// The answer is an Answer in JSON, 200 even when nothing applies; 400 for
// a query without a domain or an entry, 405 for another method, 403 for a
// browser's cross-origin reset, 503 when the store failed. Errors are
// {"error": "..."}.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case Path:
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, "GET "+Path+" shows the counters; POST "+ResetPath+" resets them")
			return
		}
		h.get(w, r)
	case ResetPath:
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeError(w, http.StatusMethodNotAllowed, "POST "+ResetPath+" resets the counters; GET "+Path+" shows them")
			return
		}
		// A page of another site in an operator's browser could otherwise
		// POST to the loopback listener.
		if err := http.NewCrossOriginProtection().Check(r); err != nil {
			writeError(w, http.StatusForbidden, "a reset from a browser page of another origin is refused: "+err.Error())
			return
		}
		h.reset(w, r)
	default:
		writeError(w, http.StatusNotFound, "not found: GET "+Path+"?domain=d&key=value... or POST "+ResetPath+"?domain=d&key=value...")
	}
}

// requested returns the counters the request's query names, or answers
// 400 naming what is wrong with it and returns false.
func (h *Handler) requested(w http.ResponseWriter, r *http.Request) (*view, bool) {
	domain, entries, err := parseQuery(r.URL.RawQuery)
	if err == nil {
		var v *view
		if v, err = h.lookup(domain, entries); err == nil {
			return v, true
		}
	}
	writeError(w, http.StatusBadRequest, err.Error())
	return nil, false
}

func (h *Handler) get(w http.ResponseWriter, r *http.Request) {
	v, ok := h.requested(w, r)
	if !ok {
		return
	}
	if err := h.peek(r.Context(), v); err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, v.answer)
}

// parseQuery reads a raw query as ServeHTTP describes, keeping the order
// url.ParseQuery's map would lose.
func parseQuery(raw string) (domain string, entries []rules.Entry, err error) {
	seen := false
	for part := range strings.SplitSeq(raw, "&") {
		if part == "" {
			continue
		}
		k, v, _ := strings.Cut(part, "=")
		if k, err = url.QueryUnescape(k); err == nil {
			v, err = url.QueryUnescape(v)
		}
		if err != nil {
			return "", nil, fmt.Errorf("query %q: %w", part, err)
		}
		switch {
		case k == "":
			return "", nil, fmt.Errorf("query %q: an entry without a key", part)
		case k == "domain" && !seen:
			domain, seen = v, true
		default:
			entries = append(entries, rules.Entry{Key: k, Value: v})
		}
	}
	switch {
	case domain == "":
		return "", nil, errors.New("no domain: want ?domain=d&key=value[&key2=value2...]")
	case len(entries) == 0:
		return "", nil, fmt.Errorf("no descriptor entry for domain %q: want ?domain=d&key=value[&key2=value2...], entries in order", domain)
	}
	return domain, entries, nil
}

// query is the query parseQuery reads back as domain and entries.
func query(domain string, entries []Entry) string {
	parts := []string{"domain=" + url.QueryEscape(domain)}
	for _, e := range entries {
		parts = append(parts, url.QueryEscape(e.Key)+"="+url.QueryEscape(e.Value))
	}
	return strings.Join(parts, "&")
}

// writeJSON writes v as the answer, indented for people, with '&', '<' and
// '>' as they are: the answer is not for a page.
func writeJSON(w http.ResponseWriter, code int, v any) {
	write(w, code, v, "  ")
}

// errorAnswer is the body of an error answer.
type errorAnswer struct {
	Error string `json:"error"`
}

// writeError writes {"error": msg} with code.
func writeError(w http.ResponseWriter, code int, msg string) {
	write(w, code, errorAnswer{msg}, "")
}

func write(w http.ResponseWriter, code int, v any, indent string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", indent)
	enc.Encode(v) // an Answer holds no NaN or infinity, the only values that fail
}

// modeName is a hit mode as a rule file says it.
func modeName(m limit.Mode) string {
	if m == limit.Advisory {
		return "shadow"
	}
	return m.String()
}
