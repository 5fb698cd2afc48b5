package rlqs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/rules"
)

// A round charges the buckets a report carried, and those whose window
// ended or whose assignment is due a refresh (ledger.go), decides their
// assignments (policy.go), and sends those that changed or are due, with
// an abandon action for each idle bucket. A timer runs the rounds no
// report brings. All but Recv runs on the stream's goroutine: no lock.

// maxActions bounds the actions of one response.
const maxActions = 1000

// sweepEvery is how often a report looks at every bucket of its stream,
// not only those it carries: Envoy may split a report into many messages,
// and a look at each would cost the square of the buckets.
const sweepEvery = time.Second

// reportsAhead is how many reports a stream reads ahead while a round
// waits for the store; the next round takes them together.
const reportsAhead = 8

// wakeMargin delays the round at a window's end: the store's clock may
// run a little behind this one's.
const wakeMargin = 50 * time.Millisecond

// stream is the state of one StreamRateLimitQuotas call.
type stream struct {
	s      *Service
	gs     rlqspb.RateLimitQuotaService_StreamRateLimitQuotasServer
	id     uint64
	client string
	domain string

	buckets    map[string]*bucket
	res        rules.Resolution // reused by resolve
	round      uint64
	lastReport time.Time       // or when the stream opened
	logged     map[string]bool // the refusal reasons logged already
	timer      *time.Timer
	// nextWake is when the timer fires; sweptAt when a report last looked
	// at every bucket.
	nextWake, sweptAt time.Time
	// The current round's buckets, those with counters, its actions, and
	// its reports.
	batch, charged []*bucket
	actions        []*rlqspb.RateLimitQuotaResponse_BucketAction
	queued         []*rlqspb.RateLimitQuotaUsageReports
}

func (s *Service) newStream(gs rlqspb.RateLimitQuotaService_StreamRateLimitQuotasServer, client string) *stream {
	return &stream{
		s: s, gs: gs, id: s.ids.Add(1), client: client,
		buckets:    map[string]*bucket{},
		lastReport: s.opts.Now(),
		logged:     map[string]bool{},
	}
}

// run serves the stream until it ends. Recv runs on its own goroutine, so
// that the timer and Shutdown are heard between reports, and always sends
// why it ended on errc: when gRPC ends a stream itself (a report that does
// not decode) ctx is done before Recv returns the cause.
func (st *stream) run(ctx context.Context) error {
	reports := make(chan *rlqspb.RateLimitQuotaUsageReports, reportsAhead)
	errc := make(chan error, 1)
	go func() {
		for {
			m, err := st.gs.Recv()
			if err != nil {
				errc <- err
				return
			}
			select {
			case reports <- m:
			case <-ctx.Done():
				errc <- ctx.Err()
				return
			}
		}
	}()
	st.timer = time.NewTimer(st.s.opts.IdleTimeout)
	defer st.timer.Stop()
	for {
		var err error
		full := false
		select {
		case m := <-reports:
			st.queued = drain(reports, append(st.queued[:0], m))
			err = st.report(ctx, st.queued...)
			clear(st.queued)
		case err = <-errc:
			return st.recvError(err)
		case <-st.timer.C:
			err, full = st.wake(ctx), true
		case <-st.s.done:
			return errShutdown
		case <-ctx.Done():
			return st.recvError(<-errc)
		}
		if err == nil {
			err = st.send()
		}
		if err != nil {
			return err
		}
		st.schedule(full)
	}
}

// recvError is what the stream ends with when Recv fails: nil when Envoy
// closed it, else the error, counted when gRPC refused a report (Internal:
// it does not decode; ResourceExhausted: too large).
func (st *stream) recvError(err error) error {
	switch status.Code(err) {
	case codes.OK:
		if errors.Is(err, io.EOF) {
			return nil
		}
	case codes.ResourceExhausted:
		st.refuse(refusedTooLarge, err)
	case codes.Internal:
		st.refuse(refusedMalformed, err)
	}
	return err
}

// refuse counts a refusal and logs its first of each reason on the stream.
func (st *stream) refuse(reason string, err error) {
	st.s.opts.Metrics.refuse(reason)
	if st.logged[reason] {
		return
	}
	st.logged[reason] = true
	st.s.opts.Logger.Warn("rlqs: refused (logged once per stream and reason; floodgate_rlqs_refused_total counts them all)",
		"reason", reason, "stream", st.id, "client", st.client, "domain", st.domain, "err", err)
}

// setDomain takes the first report's domain; a later report may repeat
// it or leave it out, not change it.
func (st *stream) setDomain(d string) error {
	switch {
	case st.domain == "" && d == "":
		return status.Error(codes.InvalidArgument, "rlqs: the stream's first report has no domain")
	case st.domain == "":
		st.domain = d
	case d != "" && d != st.domain:
		return status.Errorf(codes.InvalidArgument, "rlqs: domain %q on a stream of domain %q: open a stream per domain", d, st.domain)
	}
	return nil
}

// drain appends to ms up to reportsAhead reports that have arrived.
func drain(reports <-chan *rlqspb.RateLimitQuotaUsageReports, ms []*rlqspb.RateLimitQuotaUsageReports) []*rlqspb.RateLimitQuotaUsageReports {
	for range reportsAhead {
		select {
		case m := <-reports:
			ms = append(ms, m)
		default:
			return ms
		}
	}
	return ms
}

// report runs one round for reports that arrived together and the
// buckets due one.
func (st *stream) report(ctx context.Context, ms ...*rlqspb.RateLimitQuotaUsageReports) error {
	now := st.s.opts.Now()
	st.lastReport = now
	st.round++
	st.batch = st.batch[:0]
	for _, m := range ms {
		if err := st.setDomain(m.GetDomain()); err != nil {
			st.refuse(refusedDomain, err)
			return err
		}
		st.note(m, now)
	}
	var abandoned []*bucket
	if now.Sub(st.sweptAt) >= sweepEvery {
		st.sweptAt = now
		abandoned = st.idle(now)
		st.batch = slices.DeleteFunc(st.batch, func(b *bucket) bool { return b.abandoned })
		st.addDue(now)
	}
	st.assign(ctx, now, abandoned)
	return nil
}

// note notes a report's counts, adding its buckets new to this round to
// the batch.
func (st *stream) note(m *rlqspb.RateLimitQuotaUsageReports, now time.Time) {
	var allowed, denied int64
	for _, u := range m.GetBucketQuotaUsages() {
		b := st.bucketFor(u.GetBucketId(), now)
		if b == nil {
			continue
		}
		b.note(now, u)
		allowed += clampCount(u.GetNumRequestsAllowed())
		denied += clampCount(u.GetNumRequestsDenied())
		if b.round != st.round {
			b.round = st.round
			st.batch = append(st.batch, b)
		}
	}
	st.s.opts.Metrics.report(allowed, denied)
}

// wake runs a round for the buckets due one, or ends a stream silent for
// IdleTimeout.
func (st *stream) wake(ctx context.Context) error {
	now := st.s.opts.Now()
	if now.Sub(st.lastReport) >= st.s.opts.IdleTimeout {
		st.refuse(refusedSilent, nil)
		return status.Errorf(codes.DeadlineExceeded, "rlqs: no report for %v (idle timeout); Envoy reports every few seconds", st.s.opts.IdleTimeout)
	}
	st.round++
	st.batch = st.batch[:0]
	st.addDue(now)
	st.assign(ctx, now, nil)
	return nil
}

// bucketFor returns the stream's bucket for id, creating it within the
// bounds; nil, counted and logged, when it refuses id.
func (st *stream) bucketFor(id *rlqspb.BucketId, now time.Time) *bucket {
	o := &st.s.opts
	key, entries, err := bucketID(id, o.MaxBucketEntries, o.MaxBucketIDBytes)
	if err != nil {
		st.refuse(refusedBucketID, err)
		return nil
	}
	if b := st.buckets[key]; b != nil {
		return b
	}
	if len(st.buckets) >= o.MaxStreamBuckets || !st.s.reserveBucket() {
		st.refuse(refusedBuckets, fmt.Errorf("no room for another bucket: %d on this stream (max stream buckets %d), "+
			"or all streams hold max buckets (%d); it gets no assignment until idle buckets are abandoned",
			len(st.buckets), o.MaxStreamBuckets, o.MaxBuckets))
		return nil
	}
	b := &bucket{key: key, entries: entries, active: now}
	st.buckets[key] = b
	return b
}

// refreshAfter is the age at which a round sends an assignment again: two
// report intervals before it runs out, in time even after a late report.
func (st *stream) refreshAfter() time.Duration {
	o := &st.s.opts
	return max(o.AssignmentTTL-2*o.ReportInterval, o.ReportInterval/2)
}

// addDue adds to the batch the buckets not yet in this round whose window
// ended or whose assignment is due a refresh.
func (st *stream) addDue(now time.Time) {
	refresh := st.refreshAfter()
	for _, b := range st.buckets {
		if b.round == st.round {
			continue
		}
		if !b.wakeAt.IsZero() && !now.Before(b.wakeAt) || b.assigned() && now.Sub(b.sentAt) >= refresh {
			b.round = st.round
			st.batch = append(st.batch, b)
		}
	}
}

// idle removes the buckets without demand for IdleTimeout and returns
// them, marked abandoned.
func (st *stream) idle(now time.Time) []*bucket {
	var out []*bucket
	for k, b := range st.buckets {
		if now.Sub(b.active) >= st.s.opts.IdleTimeout {
			b.abandoned = true
			out = append(out, b)
			delete(st.buckets, k)
		}
	}
	st.s.releaseBuckets(len(out))
	return out
}

// schedule sets the timer to the earliest time a bucket is due a round or
// the stream its idle timeout. With full false it looks at the last
// round's buckets only, keeping the time set before: a bucket whose time
// moved later may wake the stream early, and that wake schedules in full.
func (st *stream) schedule(full bool) {
	o := &st.s.opts
	now := o.Now()
	next := st.lastReport.Add(o.IdleTimeout)
	if full {
		for _, b := range st.buckets {
			next = st.dueBefore(b, next, now)
		}
	} else {
		if !st.nextWake.IsZero() && st.nextWake.Before(next) {
			next = st.nextWake
		}
		for _, b := range st.batch {
			next = st.dueBefore(b, next, now)
		}
	}
	st.nextWake = next
	st.timer.Reset(max(next.Sub(now), time.Millisecond))
}

// dueBefore returns the earlier of next and when b is due a round without
// a report: its window's end, or a report interval before its assignment
// runs out. A refresh already past was let go by a failed round (failure
// mode unavailable): the reports retry it, not the timer, over and over.
func (st *stream) dueBefore(b *bucket, next, now time.Time) time.Time {
	o := &st.s.opts
	if !b.wakeAt.IsZero() && b.wakeAt.Before(next) {
		next = b.wakeAt
	}
	if due := b.sentAt.Add(o.AssignmentTTL - o.ReportInterval); b.assigned() && due.After(now) && due.Before(next) {
		next = due
	}
	return next
}

// assign runs a round for the batch and leaves in st.actions the
// assignments to send, and an abandon action for each of abandoned.
func (st *stream) assign(ctx context.Context, now time.Time, abandoned []*bucket) {
	set := st.s.rules()
	st.charged = st.charged[:0]
	for _, b := range st.batch {
		if b.set != set || set == nil {
			st.resolve(b, set)
		}
		if len(b.counters) > 0 {
			st.charged = append(st.charged, b)
		} else {
			b.settle(now)
		}
	}
	if len(st.charged) > 0 {
		if failed, err := st.s.charge(ctx, now, st.charged); err != nil {
			st.s.storeFailed(err, failed)
		}
	}
	st.actions = st.actions[:0]
	refresh, ttl := st.refreshAfter(), durationpb.New(st.s.opts.AssignmentTTL)
	for _, b := range st.batch {
		b.record(now, st.s.opts.ReportInterval)
		next, ok := st.decide(b, now)
		if ok && (!b.assigned() || next != b.sent || now.Sub(b.sentAt) >= refresh) {
			b.sent, b.sentAt = next, now
			st.logAssignment(b, next, now)
			st.actions = append(st.actions, &rlqspb.RateLimitQuotaResponse_BucketAction{
				BucketId: b.actionID(),
				BucketAction: &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{QuotaAssignmentAction: &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
					AssignmentTimeToLive: ttl, RateLimitStrategy: next.proto()}},
			})
			st.s.opts.Metrics.assigned(next.action())
		}
		b.id = nil // the report's, not to be kept
	}
	for _, b := range abandoned {
		st.actions = append(st.actions, &rlqspb.RateLimitQuotaResponse_BucketAction{
			BucketId:     b.actionID(),
			BucketAction: &rlqspb.RateLimitQuotaResponse_BucketAction_AbandonAction_{AbandonAction: &rlqspb.RateLimitQuotaResponse_BucketAction_AbandonAction{}},
		})
		st.s.opts.Metrics.assigned("abandon")
	}
}

// decide returns b's assignment after a round, or false for none to send.
// A store failure keeps the assignment in force while it has more than a
// report interval to live, so that one slow call does not open or close a
// bucket for an interval; then the failure mode decides (unavailable
// sends nothing, and Envoy's assignment runs out).
func (st *stream) decide(b *bucket, now time.Time) (strategy, bool) {
	o := &st.s.opts
	if b.failed && b.assigned() && now.Sub(b.sentAt) < o.AssignmentTTL-o.ReportInterval && (b.wakeAt.IsZero() || now.Before(b.wakeAt)) {
		return b.sent, false
	}
	b.wakeAt = time.Time{}
	switch {
	case b.failed:
		switch b.failure {
		case rules.FailureDeny:
			return strategy{kind: denyAll}, true
		case rules.FailureUnavailable:
			return strategy{}, false
		}
		return strategy{kind: allowAll}, true
	case len(b.counters) == 0 || b.shadow || st.s.opts.ShadowMode:
		return strategy{kind: allowAll}, true
	}
	own, fleet := b.demand(now, o.ReportInterval)
	s, wake := decide(b.counters, own, fleet, o.ReportInterval, b.sent)
	if wake > 0 {
		b.wakeAt = now.Add(wake + wakeMargin)
	}
	return s, true
}

func (st *stream) send() error {
	for a := st.actions; len(a) > 0; {
		n := min(len(a), maxActions)
		if err := st.gs.Send(&rlqspb.RateLimitQuotaResponse{BucketAction: a[:n]}); err != nil {
			return err
		}
		a = a[n:]
	}
	clear(st.actions)
	return nil
}

// logAssignment logs an assignment sent, at debug level, with the demand
// and the first counter's state that decided it.
func (st *stream) logAssignment(b *bucket, s strategy, now time.Time) {
	l := st.s.opts.Logger
	if !l.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	var first limit.Decision
	if len(b.counters) > 0 {
		first = b.counters[0].dec
	}
	own, fleet := b.demand(now, st.s.opts.ReportInterval)
	l.Debug("rlqs: assignment", "stream", st.id, "client", st.client, "bucket", b.key, "action", s.action(),
		"tokens_per_fill", s.perFill, "max_tokens", s.maxTokens, "fill_interval", s.fill,
		"own_demand", own, "fleet_demand", fleet, "remaining", first.Remaining, "reset_after", first.ResetAfter)
}
