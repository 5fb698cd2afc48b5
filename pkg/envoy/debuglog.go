package envoy

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/status"

	"github.com/floodgate/floodgate/pkg/rules"
)

// hiddenValue stands for a descriptor value in debug lines.
const hiddenValue = "(hidden)"

// logDecision writes a debug line for an answer: domain, code or error,
// the failure policy's cause, each descriptor, as
//
//	user=(hidden) OVER_LIMIT rule=shop.user remaining=0 limit=per_user
//
// and the time taken. Values, often API keys or user ids, are hidden
// unless the rule already shows them in metrics (detailed_metric,
// value_to_metric), where the reference server logs them all.
func (s *Service) logDecision(ctx context.Context, d time.Duration, req *pb.RateLimitRequest, sc *scratch, resp *pb.RateLimitResponse, err error) {
	attrs := make([]slog.Attr, 0, 7)
	attrs = append(attrs, slog.String("domain", req.GetDomain()))
	if err != nil {
		st := status.Convert(err)
		attrs = append(attrs, slog.String("code", st.Code().String()), slog.String("err", st.Message()))
	} else {
		attrs = append(attrs, slog.String("code", resp.GetOverallCode().String()))
		if len(sc.descs) == 0 && len(req.GetDescriptors()) > 0 {
			attrs = append(attrs, slog.Bool("domain_known", false))
		}
	}
	if sc.failure.cause != "" {
		attrs = append(attrs, slog.String("store_failure", sc.failure.cause), slog.String("policy", sc.failure.policy.String()))
	}
	// An invalid request's error names the field; its descriptors may
	// be thousands.
	if err == nil || sc.failure.cause != "" {
		attrs = append(attrs, slog.Any("descriptors", sc.describe(req, resp)))
	}
	attrs = append(attrs, slog.Duration("duration", d))
	s.opts.Logger.LogAttrs(ctx, slog.LevelDebug, "decision", attrs...)
}

// describe summarizes each descriptor of req; resp may be nil.
func (sc *scratch) describe(req *pb.RateLimitRequest, resp *pb.RateLimitResponse) []string {
	out := make([]string, len(req.GetDescriptors()))
	sts := resp.GetStatuses()
	var b strings.Builder
	for i, d := range req.GetDescriptors() {
		b.Reset()
		var rd *rules.Resolved
		if i < len(sc.res.Descriptors) {
			rd = &sc.res.Descriptors[i]
		}
		show := rd != nil && rd.Rule != nil && rd.Rule.NamedByValues()
		for j, e := range d.GetEntries() {
			if j > 0 {
				b.WriteByte(',')
			}
			value := hiddenValue
			if show {
				value = e.GetValue()
			}
			b.WriteString(e.GetKey() + "=" + value)
		}
		if i < len(sts) {
			b.WriteString(" " + sts[i].GetCode().String())
		}
		switch {
		case rd == nil:
		case rd.Override && rd.Rule == nil:
			b.WriteString(" rule=" + overrideMetric)
		case rd.Rule != nil:
			b.WriteString(" rule=" + rd.Rule.Path)
			if rd.Override {
				b.WriteString(" override")
			}
		default:
			b.WriteString(" no rule")
		}
		if i < len(sts) && sts[i].GetCurrentLimit() != nil {
			b.WriteString(" remaining=" + strconv.FormatUint(uint64(sts[i].GetLimitRemaining()), 10))
			if name := sts[i].GetCurrentLimit().GetName(); name != "" {
				b.WriteString(" limit=" + name)
			}
		}
		out[i] = b.String()
	}
	return out
}
