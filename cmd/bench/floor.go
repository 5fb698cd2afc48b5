package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/floodgate/floodgate/internal/harness"
	fgserver "github.com/floodgate/floodgate/internal/server"
)

// The gRPC floor (-grpc-floor) is what a grpc-go server costs per call on
// this machine when it decides nothing. It is a child process of this tool
// that serves ShouldRateLimit with grpc-go set up as floodgate sets it up
// (floorStreamWorkers, a CodecV2, floorGOGC; not its connection limits and
// keepalive policy, which cost nothing per call), ignores each request and
// sends one answer encoded once: OK for one descriptor. Like floodgate it
// serves gRPC's health service, SERVING, for the health checks of an Envoy
// in front of it (-envoy-peers floor). floodgate's CPU per decision minus
// the floor's is what its own work costs, Redis round trips included.
//
// As floor-redis (-envoy-peers) it also pings Redis once per call before
// answering, through go-redis as floodgate does: what any RLS server that
// asks Redis once per decision adds, at the least.

// targetFloor is result.Target for the floor.
const targetFloor = "grpc-floor"

// floorAddrEnv, when set, makes the tool serve the floor on its address
// instead of measuring (the child process of -grpc-floor); floorRedisEnv,
// when set too, is the Redis it pings once per call (floor-redis).
const (
	floorAddrEnv  = "FLOODGATE_BENCH_FLOOR_ADDR"
	floorRedisEnv = "FLOODGATE_BENCH_FLOOR_REDIS"
)

// floorStreamWorkers and floorGOGC are floodgate's own settings
// (internal/server's streamWorkers, cmd/server's defaultGOGC).
const (
	floorStreamWorkers = 64
	floorGOGC          = 400
)

// floorCodec spends nothing on protobuf for ShouldRateLimit: it ignores
// requests (decoded into nil) and sends the answer's bytes as they are.
// Everything else, the health service's messages, goes through proto.
type floorCodec struct{ proto encoding.CodecV2 }

func (c floorCodec) Marshal(v any) (mem.BufferSlice, error) {
	if b, ok := v.(*[]byte); ok {
		return mem.BufferSlice{mem.SliceBuffer(*b)}, nil
	}
	return c.proto.Marshal(v)
}

func (c floorCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if v == nil {
		return nil
	}
	return c.proto.Unmarshal(data, v)
}

func (floorCodec) Name() string { return "proto" }

var _ encoding.CodecV2 = floorCodec{}

// serveFloor serves the floor on addr until the process is stopped, with
// a PING to the Redis at redisAddr in every call unless it is empty. A
// failed PING fails the call (UNAVAILABLE), as a failed Redis call fails
// floodgate's decision.
func serveFloor(addr, redisAddr string) error {
	debug.SetGCPercent(floorGOGC)
	answer, err := proto.Marshal(&pb.RateLimitResponse{
		OverallCode: pb.RateLimitResponse_OK,
		Statuses:    []*pb.RateLimitResponse_DescriptorStatus{{Code: pb.RateLimitResponse_OK, LimitRemaining: 1}},
	})
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	workers := uint32(max(floorStreamWorkers, runtime.GOMAXPROCS(0)))
	codec := floorCodec{proto: encoding.GetCodecV2(grpcproto.Name)}
	s := grpc.NewServer(grpc.NumStreamWorkers(workers), grpc.ForceServerCodecV2(codec),
		grpc.StaticStreamWindowSize(fgserver.FlowWindow), grpc.StaticConnWindowSize(fgserver.FlowWindow))
	hs := health.NewServer()
	for _, name := range fgserver.HealthServices {
		hs.SetServingStatus(name, healthpb.HealthCheckResponse_SERVING)
	}
	healthpb.RegisterHealthServer(s, hs)
	var rdb *redis.Client
	if redisAddr != "" {
		rdb = redis.NewClient(&redis.Options{Addr: redisAddr})
		defer rdb.Close()
	}
	desc := grpc.ServiceDesc{
		ServiceName: pb.RateLimitService_ServiceDesc.ServiceName,
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "ShouldRateLimit",
			Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
				if err := dec(nil); err != nil {
					return nil, err
				}
				if rdb != nil {
					if err := rdb.Ping(ctx).Err(); err != nil {
						return nil, status.Errorf(codes.Unavailable, "floor: redis: %v", err)
					}
				}
				return &answer, nil
			},
		}},
	}
	var impl any = struct{}{}
	s.RegisterService(&desc, impl)
	return s.Serve(l)
}

// startFloor starts the floor in a child process on a free port, pinging
// the Redis at redisAddr in every call unless it is empty, and returns
// when it answers.
func startFloor(ctx context.Context, redisAddr string) (*child, server, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, server{}, err
	}
	addr, err := harness.FreeAddr()
	if err != nil {
		return nil, server{}, err
	}
	env := []string{floorAddrEnv + "=" + addr}
	if redisAddr != "" {
		env = append(env, floorRedisEnv+"="+redisAddr)
	}
	p, err := startChild("grpc floor", self, nil, env...)
	if err != nil {
		return nil, server{}, err
	}
	err = harness.WaitReady(ctx, p.Process, 10*time.Second, func(ctx context.Context) error {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err == nil {
			c.Close()
		}
		return err
	})
	if err != nil {
		p.Stop(time.Second)
		return nil, server{}, fmt.Errorf("grpc floor on %s: %w\n%s", addr, err, p.logTail())
	}
	return p, server{grpcAddr: addr, pid: p.Pid()}, nil
}
