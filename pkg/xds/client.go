// Package xds takes floodgate's rules from an xDS management server, as
// envoyproxy/ratelimit does with CONFIG_TYPE=GRPC_XDS_SOTW: it subscribes
// over ADS, state of the world, to RateLimitConfig resources (TypeURL),
// compiles each response into a rules.Feed, and ACKs it, or NACKs it with
// the validation errors while the last good rules keep serving. When the
// stream breaks it keeps the rules, reconnects with backoff and subscribes
// again. The stream's messages are go-control-plane's, the connection and
// its backoff grpc's; this package is the glue.
package xds

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/floodgate/floodgate/pkg/rules"
)

// Defaults of Options, those of envoyproxy/ratelimit's settings.
const (
	DefaultNodeID              = "default"
	DefaultRetryInterval       = 3 * time.Second
	DefaultBackoffInitial      = 10 * time.Second
	DefaultBackoffMax          = 60 * time.Second
	DefaultBackoffRandomFactor = 0.5
)

// Options configure a Client. The zero value of a field means its default.
type Options struct {
	// ServerURL is the management server, as a gRPC target
	// ("host:port", "dns:///host:port"). Required.
	ServerURL string
	// NodeID and NodeMetadata describe this server to the management
	// server, which picks the snapshot by them (CONFIG_GRPC_XDS_NODE_ID,
	// CONFIG_GRPC_XDS_NODE_METADATA). NodeID defaults to "default".
	NodeID       string
	NodeMetadata map[string]string
	// Headers are sent as gRPC metadata on the stream
	// (CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS), for an authorization
	// token, say.
	Headers map[string]string
	// TLS, when not nil, secures the connection; its ServerName, when set,
	// is the name the server's certificate must hold
	// (CONFIG_GRPC_XDS_SERVER_TLS_SAN). Nil connects in plaintext.
	TLS *tls.Config
	// RetryInterval is the pause before subscribing again after the
	// stream ended, ±50 % (CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL).
	RetryInterval time.Duration
	// BackoffInitial, BackoffMax and BackoffRandomFactor space the
	// attempts to connect while the server cannot be reached: the first
	// waits BackoffInitial, each next one 1.6 times longer up to
	// BackoffMax, each randomised by ±BackoffRandomFactor unless NoJitter
	// (XDS_CLIENT_BACKOFF_INITIAL_INTERVAL, _MAX_INTERVAL,
	// _RANDOM_FACTOR, XDS_CLIENT_BACKOFF_JITTER=false). A zero
	// BackoffRandomFactor means 0.5; use NoJitter for none.
	BackoffInitial, BackoffMax time.Duration
	BackoffRandomFactor        float64
	NoJitter                   bool
	// MaxMessageBytes bounds a response (XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES);
	// zero is gRPC's 4 MiB.
	MaxMessageBytes int
	// Logger receives the connection's events; nil discards them.
	Logger *slog.Logger
}

// Client keeps a rules.Feed up to date from a management server.
type Client struct {
	feed   *rules.Feed
	opts   Options
	node   *core.Node
	logger *slog.Logger
	conn   *grpc.ClientConn
	acked  string // version_info of the last response ACKed, sent when subscribing again

	// The last response refused on the current stream, by a hash of its
	// version and resources, and why. go-control-plane's snapshot cache
	// answers a NACK, which carries the last good version, by sending the
	// refused snapshot again at once; its repeats are NACKed again without
	// compiling, counting or logging them anew, after nackRepeatDelay so
	// that the two ends do not spin. Keyed on the content, not the version
	// alone, and forgotten with the stream: a management server that
	// restarts may reuse a refused version_info (Envoy Gateway's is a
	// counter from 1) for good rules, which must then be compiled.
	refused    [sha256.Size]byte
	refusedErr string
}

// nackRepeatDelay spaces the NACKs of a version sent again. A good version
// pushed meanwhile waits at most this long.
const nackRepeatDelay = 500 * time.Millisecond

// New checks opts and returns a Client that feeds feed once Run runs. It
// does not connect: a management server that is down is waited for.
func New(feed *rules.Feed, opts Options) (*Client, error) {
	if opts.ServerURL == "" {
		return nil, errors.New("xds: no management server address")
	}
	if opts.NodeID == "" {
		opts.NodeID = DefaultNodeID
	}
	if opts.RetryInterval == 0 {
		opts.RetryInterval = DefaultRetryInterval
	}
	if opts.BackoffInitial == 0 {
		opts.BackoffInitial = DefaultBackoffInitial
	}
	if opts.BackoffMax == 0 {
		opts.BackoffMax = DefaultBackoffMax
	}
	if opts.BackoffRandomFactor == 0 {
		opts.BackoffRandomFactor = DefaultBackoffRandomFactor
	}
	switch {
	case opts.RetryInterval < 0:
		return nil, fmt.Errorf("xds: retry interval %v: must be positive", opts.RetryInterval)
	case opts.BackoffInitial < 0 || opts.BackoffMax < opts.BackoffInitial:
		return nil, fmt.Errorf("xds: backoff from %v to %v: want 0 < initial <= max", opts.BackoffInitial, opts.BackoffMax)
	case opts.BackoffRandomFactor < 0 || opts.BackoffRandomFactor > 1:
		return nil, fmt.Errorf("xds: backoff random factor %v: want 0 to 1", opts.BackoffRandomFactor)
	case opts.MaxMessageBytes < 0:
		return nil, fmt.Errorf("xds: max message size %d: must not be negative", opts.MaxMessageBytes)
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	node := &core.Node{Id: opts.NodeID, UserAgentName: "floodgate"}
	if len(opts.NodeMetadata) > 0 {
		fields := make(map[string]*structpb.Value, len(opts.NodeMetadata))
		for k, v := range opts.NodeMetadata {
			fields[k] = structpb.NewStringValue(v)
		}
		node.Metadata = &structpb.Struct{Fields: fields}
	}
	creds := insecure.NewCredentials()
	if opts.TLS != nil {
		creds = credentials.NewTLS(opts.TLS)
	}
	jitter := opts.BackoffRandomFactor
	if opts.NoJitter {
		jitter = 0
	}
	dial := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: backoff.Config{BaseDelay: opts.BackoffInitial, Multiplier: backoff.DefaultConfig.Multiplier,
				Jitter: jitter, MaxDelay: opts.BackoffMax},
			MinConnectTimeout: 20 * time.Second,
		}),
	}
	if opts.MaxMessageBytes > 0 {
		dial = append(dial, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(opts.MaxMessageBytes)))
	}
	conn, err := grpc.NewClient(opts.ServerURL, dial...)
	if err != nil {
		return nil, fmt.Errorf("xds: management server %s: %w", opts.ServerURL, err)
	}
	return &Client{feed: feed, opts: opts, node: node, logger: logger, conn: conn}, nil
}

// Run subscribes and applies the responses until ctx is done, then closes
// the connection and returns ctx's error. Whenever the stream ends it logs
// why, keeps the rules in force, waits about RetryInterval and subscribes
// again, telling the server the last version it ACKed. Run may be called
// once.
func (c *Client) Run(ctx context.Context) error {
	defer c.conn.Close()
	c.logger.Info("xds: subscribing to rate-limit rules", "server", c.opts.ServerURL, "node", c.opts.NodeID, "type", TypeURL)
	for {
		err := c.subscribe(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// ±50 %, so that many servers cut off together do not come back
		// together, as the reference's linear backoff with jitter.
		wait := time.Duration(float64(c.opts.RetryInterval) * (0.5 + rand.Float64()))
		c.logger.Warn("xds: stream to the management server ended; the rules in force stay, subscribing again",
			"server", c.opts.ServerURL, "error", err.Error(), "in", wait.Round(time.Millisecond).String(), "version", c.acked)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// subscribe runs one stream until it fails.
func (c *Client) subscribe(ctx context.Context) error {
	ctx, cancel := context.WithCancel(metadata.NewOutgoingContext(ctx, metadata.New(c.opts.Headers)))
	defer cancel()
	c.refusedErr = "" // a refusal holds for its stream only
	// WaitForReady: while the server cannot be reached the stream waits
	// for grpc's connection backoff instead of failing at once.
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(c.conn).StreamAggregatedResources(ctx, grpc.WaitForReady(true))
	if err != nil {
		return err
	}
	if err := stream.Send(c.request("", nil)); err != nil {
		return err
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return err
		}
		if err := stream.Send(c.apply(ctx, resp)); err != nil {
			return err
		}
	}
}

// apply puts a response's rules in force and returns the ACK, or the NACK
// naming every problem.
func (c *Client) apply(ctx context.Context, resp *discovery.DiscoveryResponse) *discovery.DiscoveryRequest {
	version := resp.GetVersionInfo()
	key := contentKey(resp)
	if c.refusedErr != "" && key == c.refused {
		t := time.NewTimer(nackRepeatDelay)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		return c.request(resp.GetNonce(), &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: c.refusedErr})
	}
	var err error
	if resp.GetTypeUrl() != TypeURL {
		err = fmt.Errorf("response of type %q, want %s", resp.GetTypeUrl(), TypeURL)
		c.feed.Refuse(version, err)
	} else if files, ferr := Files(resp.GetResources()); ferr != nil {
		err = ferr
		c.feed.Refuse(version, err)
	} else {
		err = c.feed.Push(version, files)
	}
	if err != nil {
		c.refused, c.refusedErr = key, err.Error()
		c.logger.Warn("xds: NACK", "version", version, "kept", c.acked)
		return c.request(resp.GetNonce(), &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: err.Error()})
	}
	c.acked, c.refusedErr = version, ""
	c.logger.Debug("xds: ACK", "version", version, "resources", len(resp.GetResources()))
	return c.request(resp.GetNonce(), nil)
}

// contentKey identifies a response by its version, type and resources, so
// that a repeat of a refused response is known without compiling it.
func contentKey(resp *discovery.DiscoveryResponse) [sha256.Size]byte {
	h := sha256.New()
	field := func(b []byte) {
		h.Write(binary.AppendUvarint(nil, uint64(len(b))))
		h.Write(b)
	}
	field([]byte(resp.GetVersionInfo()))
	field([]byte(resp.GetTypeUrl()))
	for _, r := range resp.GetResources() {
		field([]byte(r.GetTypeUrl()))
		field(r.GetValue())
	}
	var k [sha256.Size]byte
	h.Sum(k[:0])
	return k
}

// request is a DiscoveryRequest for every resource of TypeURL, carrying the
// version last ACKed; with detail it is a NACK.
func (c *Client) request(nonce string, detail *rpcstatus.Status) *discovery.DiscoveryRequest {
	return &discovery.DiscoveryRequest{
		Node:          c.node,
		VersionInfo:   c.acked,
		TypeUrl:       TypeURL,
		ResponseNonce: nonce,
		ErrorDetail:   detail,
	}
}
