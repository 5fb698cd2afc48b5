// Package xds takes floodgate's rules from an xDS management server, as
// envoyproxy/ratelimit does with CONFIG_TYPE=GRPC_XDS_SOTW: it subscribes
// over ADS, state of the world, to RateLimitConfig resources (TypeURL),
// compiles each response into a rules.Feed and ACKs it, or NACKs it while
// the last good rules keep serving, as they do while the stream is down.
package xds

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/floodgate/floodgate/pkg/rules"
)

// Client keeps a rules.Feed up to date from a management server.
type Client struct {
	feed *rules.Feed
	opts Options
	node *core.Node
	conn *grpc.ClientConn

	// The last response refused on the current stream (contentKey), and
	// why. go-control-plane's snapshot cache answers a NACK by sending the
	// refused snapshot again at once: its repeats are NACKed after
	// nackRepeatDelay without compiling or logging them. Keyed on the
	// content and forgotten with the stream: a restarted management server
	// may reuse a refused version_info (Envoy Gateway's count from 1).
	refused    [sha256.Size]byte
	refusedErr string

	// The connection's state, for the stall warnings and Status().Source.
	mu        sync.Mutex
	state     connectivity.State
	receiving bool      // the current stream has delivered a response
	since     time.Time // when receiving last became false
	lastErr   string    // why the last stream ended or the connection failed
	// lastACK is the version_info last ACKed, sent when subscribing again;
	// its writer, the stream's goroutine, reads it without mu.
	lastACK   string
	lastACKAt time.Time
}

// nackRepeatDelay spaces the NACKs of a refused response sent again.
const nackRepeatDelay = 500 * time.Millisecond

// New checks opts and returns a Client that feeds feed once Run runs. It
// does not connect: a management server that is down is waited for.
func New(feed *rules.Feed, opts Options) (*Client, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	conn, err := grpc.NewClient(opts.ServerURL, dialOptions(opts)...)
	if err != nil {
		return nil, fmt.Errorf("xds: management server %s: %w", opts.ServerURL, err)
	}
	return &Client{feed: feed, opts: opts, node: node(opts), conn: conn}, nil
}

// node is how the client introduces itself to the management server.
func node(opts Options) *core.Node {
	n := &core.Node{Id: opts.NodeID, UserAgentName: "floodgate"}
	if len(opts.NodeMetadata) > 0 {
		fields := make(map[string]*structpb.Value, len(opts.NodeMetadata))
		for k, v := range opts.NodeMetadata {
			fields[k] = structpb.NewStringValue(v)
		}
		n.Metadata = &structpb.Struct{Fields: fields}
	}
	return n
}

func dialOptions(opts Options) []grpc.DialOption {
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
	return dial
}

// Run subscribes and applies the responses until ctx is done, then closes
// the connection and returns ctx's error. Whenever the stream ends it
// subscribes again after about RetryInterval. Run may be called once.
func (c *Client) Run(ctx context.Context) error {
	watchCtx, stopWatch := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer c.conn.Close()
	defer wg.Wait()
	defer stopWatch()
	c.since = time.Now() // before the goroutines that read it start
	wg.Go(func() { c.followState(watchCtx) })
	wg.Go(func() { c.warnStalls(watchCtx) })
	c.opts.Logger.Info("xds: subscribing to rate-limit rules", "server", c.opts.ServerURL, "node", c.opts.NodeID, "type", TypeURL)
	for {
		err := c.subscribe(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		c.note(func() {
			if c.receiving {
				c.since = time.Now()
			}
			c.receiving, c.lastErr = false, err.Error()
		})
		// ±50 %, so that servers cut off together do not come back together.
		wait := time.Duration(float64(c.opts.RetryInterval) * (0.5 + rand.Float64()))
		c.opts.Logger.Warn("xds: stream to the management server ended; the rules in force stay, subscribing again",
			"server", c.opts.ServerURL, "error", err.Error(), "in", wait.Round(time.Millisecond).String(), "version", c.lastACK)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

// subscribe runs one stream until it fails.
func (c *Client) subscribe(ctx context.Context) error {
	ctx, cancel := context.WithCancel(metadata.NewOutgoingContext(ctx, metadata.New(c.opts.Headers)))
	defer cancel()
	c.refusedErr = "" // a refusal holds for its stream only
	// While the server cannot be reached, wait for grpc's backoff.
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
		c.note(func() { c.receiving = true })
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
	nack := func() *discovery.DiscoveryRequest {
		return c.request(resp.GetNonce(), &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: c.refusedErr})
	}
	if c.refusedErr != "" && key == c.refused {
		select {
		case <-ctx.Done():
		case <-time.After(nackRepeatDelay):
		}
		return nack()
	}
	files, err := Files(resp.GetResources())
	if resp.GetTypeUrl() != TypeURL {
		err = fmt.Errorf("response of type %q, want %s", resp.GetTypeUrl(), TypeURL)
	}
	if err != nil {
		c.feed.Refuse(version, err)
	} else {
		err = c.feed.Push(version, files)
	}
	if err != nil {
		c.refused, c.refusedErr = key, nackDetail(err.Error())
		c.opts.Logger.Warn("xds: NACK", "version", version, "kept", c.lastACK)
		return nack()
	}
	c.refusedErr = ""
	c.note(func() { c.lastACK, c.lastACKAt = version, time.Now() })
	c.opts.Logger.Debug("xds: ACK", "version", version, "resources", len(resp.GetResources()))
	return c.request(resp.GetNonce(), nil)
}

// maxNACKDetail bounds a NACK's error_detail, in bytes: a management
// server ends a stream that sends more than 4 MiB. Every problem stays in
// the feed's status (/rlconfig).
const maxNACKDetail = 64 << 10

// nackDetail cuts msg, one problem a line, to at most maxNACKDetail bytes
// at a line's end, saying how many lines were left out.
func nackDetail(msg string) string {
	if len(msg) <= maxNACKDetail {
		return msg
	}
	cut := strings.LastIndexByte(msg[:maxNACKDetail], '\n')
	left := strings.Count(msg[max(cut, 0):], "\n")
	if cut < 0 {
		// One long line: cut it at a character's start.
		cut, left = maxNACKDetail, left+1
		for cut > 0 && !utf8.RuneStart(msg[cut]) {
			cut--
		}
	}
	return fmt.Sprintf("%s\n... and %d more lines: every problem is on /rlconfig", msg[:cut], left)
}

// note runs change under c.mu, then shows the new state in the feed's
// Status.
func (c *Client) note(change func()) {
	c.mu.Lock()
	change()
	s := c.describe()
	c.mu.Unlock()
	c.feed.SetSource(s)
}

// describe is the state for Status().Source, with times since it is
// computed at each change only; c.mu is held.
func (c *Client) describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "xds %s node %s: ", c.opts.ServerURL, c.opts.NodeID)
	switch {
	case c.receiving:
		b.WriteString("receiving rules")
	case c.state == connectivity.Ready:
		fmt.Fprintf(&b, "connected, but no rules received since %s", c.since.UTC().Format(time.RFC3339))
	default:
		fmt.Fprintf(&b, "not connected (%s) since %s", c.state, c.since.UTC().Format(time.RFC3339))
	}
	if !c.receiving && c.lastErr != "" {
		fmt.Fprintf(&b, ": %s", c.lastErr)
	}
	if c.lastACK != "" || !c.lastACKAt.IsZero() {
		fmt.Fprintf(&b, "; last ACK %q at %s", c.lastACK, c.lastACKAt.UTC().Format(time.RFC3339))
	} else {
		b.WriteString("; nothing ACKed yet")
	}
	return b.String()
}

// followState records the connection's state changes until ctx is done;
// a probe that does not wait learns why a connection fails.
func (c *Client) followState(ctx context.Context) {
	for {
		state := c.conn.GetState()
		why := ""
		if state == connectivity.TransientFailure {
			why = c.probe(ctx)
		}
		c.note(func() {
			c.state = state
			if why != "" {
				c.lastErr = why
			}
		})
		if !c.conn.WaitForStateChange(ctx, state) {
			return
		}
	}
}

// probe returns the error of a stream opened without waiting for the
// connection, "" when one opened.
func (c *Client) probe(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err := discovery.NewAggregatedDiscoveryServiceClient(c.conn).StreamAggregatedResources(ctx)
	if err == nil {
		return ""
	}
	if s, ok := status.FromError(err); ok {
		return s.Code().String() + ": " + s.Message()
	}
	return err.Error()
}

// warnStalls logs a warning every StallWarning while no stream delivers
// rules, until ctx is done.
func (c *Client) warnStalls(ctx context.Context) {
	t := time.NewTicker(c.opts.StallWarning)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c.lookForStall()
	}
}

func (c *Client) lookForStall() {
	c.mu.Lock()
	receiving, state, since, lastErr, acked := c.receiving, c.state, c.since, c.lastErr, c.lastACK
	c.mu.Unlock()
	if receiving {
		return
	}
	kept := "none received yet"
	if acked != "" || c.feed.Status().Version > 0 {
		kept = "version " + strconv.Quote(acked) + " stays in force"
	}
	waited := time.Since(since).Round(100 * time.Millisecond).String()
	if state == connectivity.Ready {
		c.opts.Logger.Warn("xds: connected to the management server, but it sends no rules: does it hold a snapshot for this node id?",
			"server", c.opts.ServerURL, "node", c.opts.NodeID, "waited", waited, "rules", kept)
		return
	}
	c.opts.Logger.Warn("xds: cannot reach the management server", "server", c.opts.ServerURL, "state", state.String(),
		"error", lastErr, "waited", waited, "rules", kept)
}

// contentKey identifies a response by its version, type and resources in
// any order, as the snapshot cache sends them in map order.
func contentKey(resp *discovery.DiscoveryResponse) [sha256.Size]byte {
	sums := make([][]byte, 0, len(resp.GetResources()))
	for _, r := range resp.GetResources() {
		h := sha256.New()
		fmt.Fprintf(h, "%q %d ", r.GetTypeUrl(), len(r.GetValue()))
		h.Write(r.GetValue())
		sums = append(sums, h.Sum(nil))
	}
	slices.SortFunc(sums, bytes.Compare)
	h := sha256.New()
	fmt.Fprintf(h, "%q %q ", resp.GetVersionInfo(), resp.GetTypeUrl())
	for _, sum := range sums {
		h.Write(sum)
	}
	return [sha256.Size]byte(h.Sum(nil))
}

// request is a DiscoveryRequest for every resource of TypeURL, carrying the
// version last ACKed; with detail it is a NACK.
func (c *Client) request(nonce string, detail *rpcstatus.Status) *discovery.DiscoveryRequest {
	return &discovery.DiscoveryRequest{
		Node:          c.node,
		VersionInfo:   c.lastACK,
		TypeUrl:       TypeURL,
		ResponseNonce: nonce,
		ErrorDetail:   detail,
	}
}
