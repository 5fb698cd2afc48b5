// Package otlptest is an OpenTelemetry trace receiver for tests: the OTLP
// protocol on real loopback sockets, over gRPC (the generated
// collector.trace.v1 TraceService) and over HTTP (POST /v1/traces with a
// protobuf body, gzip or not), which is what the OTLP exporters talk to. It
// keeps the spans it receives for the test to read.
package otlptest

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Span is a received span, flattened.
type Span struct {
	Name                    string
	TraceID, SpanID, Parent string // hex; Parent is "" for a root span
	Kind                    tracepb.Span_SpanKind
	Start, End              time.Time
	Attrs                   map[string]any // string, int64, bool or float64
	Resource                map[string]any
	StatusCode              tracepb.Status_StatusCode
	StatusMessage           string
	// Via is how it came: "grpc" or "http".
	Via string
}

// Receiver receives spans over OTLP/gRPC and OTLP/HTTP.
type Receiver struct {
	collectorpb.UnimplementedTraceServiceServer

	grpcAddr, httpAddr string

	mu      sync.Mutex
	spans   []Span
	arrived chan struct{}
}

// Start starts a Receiver on two free ports of 127.0.0.1, stopped when the
// test ends.
func Start(t testing.TB) *Receiver {
	t.Helper()
	r := &Receiver{arrived: make(chan struct{}, 1)}
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.grpcAddr, r.httpAddr = gl.Addr().String(), hl.Addr().String()
	gs := grpc.NewServer()
	collectorpb.RegisterTraceServiceServer(gs, r)
	go gs.Serve(gl)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", r.serveHTTP)
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go hs.Serve(hl)
	t.Cleanup(func() {
		gs.Stop()
		hs.Close()
	})
	return r
}

// GRPCEndpoint is the gRPC listener's URL, for
// OTEL_EXPORTER_OTLP_ENDPOINT (plain text: http://).
func (r *Receiver) GRPCEndpoint() string { return "http://" + r.grpcAddr }

// GRPCAddr is the gRPC listener's host:port.
func (r *Receiver) GRPCAddr() string { return r.grpcAddr }

// HTTPEndpoint is the HTTP listener's base URL, for
// OTEL_EXPORTER_OTLP_ENDPOINT (the exporter appends /v1/traces).
func (r *Receiver) HTTPEndpoint() string { return "http://" + r.httpAddr }

// Export implements the OTLP/gRPC TraceService.
func (r *Receiver) Export(_ context.Context, req *collectorpb.ExportTraceServiceRequest) (*collectorpb.ExportTraceServiceResponse, error) {
	r.add(req, "grpc")
	return &collectorpb.ExportTraceServiceResponse{}, nil
}

func (r *Receiver) serveHTTP(w http.ResponseWriter, req *http.Request) {
	if ct := req.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		http.Error(w, fmt.Sprintf("content type %q: want application/x-protobuf", ct), http.StatusUnsupportedMediaType)
		return
	}
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var msg collectorpb.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &msg); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.add(&msg, "http")
	out, _ := proto.Marshal(&collectorpb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

func (r *Receiver) add(req *collectorpb.ExportTraceServiceRequest, via string) {
	var got []Span
	for _, rs := range req.GetResourceSpans() {
		res := attrs(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				got = append(got, Span{
					Name:          s.GetName(),
					TraceID:       hex.EncodeToString(s.GetTraceId()),
					SpanID:        hex.EncodeToString(s.GetSpanId()),
					Parent:        hex.EncodeToString(s.GetParentSpanId()),
					Kind:          s.GetKind(),
					Start:         time.Unix(0, int64(s.GetStartTimeUnixNano())),
					End:           time.Unix(0, int64(s.GetEndTimeUnixNano())),
					Attrs:         attrs(s.GetAttributes()),
					Resource:      res,
					StatusCode:    s.GetStatus().GetCode(),
					StatusMessage: s.GetStatus().GetMessage(),
					Via:           via,
				})
			}
		}
	}
	r.mu.Lock()
	r.spans = append(r.spans, got...)
	r.mu.Unlock()
	select {
	case r.arrived <- struct{}{}:
	default:
	}
}

func attrs(kvs []*commonpb.KeyValue) map[string]any {
	m := make(map[string]any, len(kvs))
	for _, kv := range kvs {
		switch v := kv.GetValue().GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.GetKey()] = v.StringValue
		case *commonpb.AnyValue_IntValue:
			m[kv.GetKey()] = v.IntValue
		case *commonpb.AnyValue_BoolValue:
			m[kv.GetKey()] = v.BoolValue
		case *commonpb.AnyValue_DoubleValue:
			m[kv.GetKey()] = v.DoubleValue
		case *commonpb.AnyValue_BytesValue:
			m[kv.GetKey()] = bytes.Clone(v.BytesValue)
		default:
			m[kv.GetKey()] = kv.GetValue().String()
		}
	}
	return m
}

// Spans returns the spans received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Wait returns the spans received once at least n spans named name have
// come, failing the test if they have not within timeout.
func (r *Receiver) Wait(t testing.TB, name string, n int, timeout time.Duration) []Span {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		all := r.Spans()
		c := 0
		for _, s := range all {
			if s.Name == name {
				c++
			}
		}
		if c >= n {
			return all
		}
		select {
		case <-r.arrived:
		case <-deadline.C:
			t.Fatalf("otlptest: %d span(s) named %q after %v, want %d; received: %v", c, name, timeout, n, names(all))
			return nil
		}
	}
}

func names(spans []Span) []string {
	out := make([]string, len(spans))
	for i, s := range spans {
		out[i] = s.Name + " via " + s.Via
	}
	return out
}

// Find returns the first span named name, or false.
func Find(spans []Span, name string) (Span, bool) {
	for _, s := range spans {
		if s.Name == name {
			return s, true
		}
	}
	return Span{}, false
}
