package main

import (
	"context"
	"io"
	"net"
	"sync/atomic"
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
)

// okServer answers every call OK.
type okServer struct {
	pb.UnimplementedRateLimitServiceServer
}

func (okServer) ShouldRateLimit(context.Context, *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	return &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK}, nil
}

// TestLoadSendsNoPings: the load generator's connections send no
// flow-control PINGs, as Envoy sends none, so that a server measured
// through them does not spend a write per call answering them. The calls
// pass through a proxy that reads every frame the client writes.
func TestLoadSendsNoPings(t *testing.T) {
	backend, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	pb.RegisterRateLimitServiceServer(s, okServer{})
	go s.Serve(backend)
	t.Cleanup(s.Stop)

	front, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { front.Close() })
	var pings, frames atomic.Int64
	go func() {
		c, err := front.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		b, err := net.Dial("tcp", backend.Addr().String())
		if err != nil {
			return
		}
		defer b.Close()
		go io.Copy(c, b)
		// What is read from the client goes on to the server as it is read.
		r := io.TeeReader(c, b)
		if _, err := io.ReadFull(r, make([]byte, len(http2.ClientPreface))); err != nil {
			return
		}
		fr := http2.NewFramer(nil, r)
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			frames.Add(1)
			if p, ok := f.(*http2.PingFrame); ok && !p.IsAck() {
				pings.Add(1)
			}
		}
	}()

	conns, err := dial(front.Addr().String(), 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeAll(conns) })
	const calls = 10
	for range calls {
		var resp pb.RateLimitResponse
		if err := conns[0].Invoke(t.Context(), shouldRateLimit, &pb.RateLimitRequest{Domain: "d"}, &resp); err != nil {
			t.Fatal(err)
		}
	}
	// Each call is at least a HEADERS and a DATA frame.
	if n := frames.Load(); n < 2*calls {
		t.Fatalf("the proxy read %d frames from the client for %d calls", n, calls)
	}
	if n := pings.Load(); n != 0 {
		t.Errorf("the client sent %d PINGs in %d calls, want none", n, calls)
	}
}
