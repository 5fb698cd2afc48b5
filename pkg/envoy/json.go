package envoy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// JSONHandler returns the handler of the reference server's /json
// endpoint for svc: a POST of a RateLimitRequest in protojson, of at most
// MaxRequestBytes when set, answered in protojson with 200, or 429 when
// OVER_LIMIT; a request refused gets 405 (not a POST), 413 (too large) or
// 400 (naming what is wrong), and svc's error 400 for InvalidArgument,
// 503 for Unavailable, 500 otherwise. refused, when not nil, is called as
// by Register, and with "unknown_method" for a method other than POST.
// The request's span describes an HTTP request, a child of the caller's
// span in its headers.
func (c *Codec) JSONHandler(svc pb.RateLimitServiceServer, refused func(reason string)) http.Handler {
	if refused == nil {
		refused = func(string) {}
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, ok := c.readJSON(w, r, refused)
		if !ok {
			return
		}
		resp, err := svc.ShouldRateLimit(withHTTPRequest(r.Context(), r), req)
		if err != nil {
			http.Error(w, status.Convert(err).Message(), httpStatus(err))
			return
		}
		out, err := marshalJSON(resp)
		if err != nil {
			http.Error(w, "encoding the response: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if resp.GetOverallCode() == pb.RateLimitResponse_OVER_LIMIT {
			w.WriteHeader(http.StatusTooManyRequests)
		}
		w.Write(out)
	})
}

// readJSON reads and decodes the request of r, or answers the refusal and
// counts it. A body cut short is no request to count: nobody reads the
// answer.
func (c *Codec) readJSON(w http.ResponseWriter, r *http.Request, refused func(string)) (*pb.RateLimitRequest, bool) {
	if r.Method != http.MethodPost {
		refused(refusedUnknownMethod)
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "POST a RateLimitRequest as JSON", http.StatusMethodNotAllowed)
		return nil, false
	}
	body := r.Body
	if c.MaxRequestBytes > 0 {
		body = http.MaxBytesReader(w, r.Body, int64(c.MaxRequestBytes))
	}
	b, err := io.ReadAll(body)
	if err != nil {
		code := http.StatusBadRequest
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			code = http.StatusRequestEntityTooLarge
			refused(refusedTooLarge)
		}
		http.Error(w, "reading the body: "+err.Error(), code)
		return nil, false
	}
	req := new(pb.RateLimitRequest)
	if err = protojson.Unmarshal(b, req); err != nil {
		err = fmt.Errorf("invalid RateLimitRequest: %s", protoErrorText(err))
	} else if c.VetJSON != nil {
		err = c.VetJSON(req)
	}
	if err != nil {
		refused(refusedMalformed)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return nil, false
	}
	return req, true
}

// httpStatus is /json's status for the service's error: 400 for a bad
// request, 503 when the store failed and the policy says unavailable.
func httpStatus(err error) int {
	switch status.Code(err) {
	case codes.InvalidArgument:
		return http.StatusBadRequest
	case codes.Unavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// marshalJSON encodes m as protojson, compacted: protojson varies its
// spacing on purpose, and scripts compare /json's answers byte for byte.
func marshalJSON(m proto.Message) ([]byte, error) {
	out, err := protojson.Marshal(m)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if err := json.Compact(&b, out); err != nil {
		return nil, fmt.Errorf("compacting protojson: %w", err)
	}
	return b.Bytes(), nil
}
