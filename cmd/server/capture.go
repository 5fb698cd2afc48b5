package main

import (
	"log/slog"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate/floodgate/internal/replay"
	"github.com/floodgate/floodgate/internal/settings"
)

// withCapture wraps svc in a replay.Capture when -capture is set, with its
// counts in reg, and returns what to serve and what stops the recording.
func withCapture(svc pb.RateLimitServiceServer, cfg *settings.Capture, reg prometheus.Registerer, logger *slog.Logger) (pb.RateLimitServiceServer, func(), error) {
	if cfg.Path == "" {
		return svc, func() {}, nil
	}
	opts := cfg.Options
	opts.Logger = logger
	c, err := replay.NewCapture(svc, cfg.Path, opts)
	if err != nil {
		return nil, nil, settings.FlagError("capture", err)
	}
	for _, o := range []struct {
		outcome string
		count   func(replay.CaptureStats) int64
	}{
		{"written", func(s replay.CaptureStats) int64 { return s.Written }},
		{"dropped", func(s replay.CaptureStats) int64 { return s.Dropped }},
		{"over_size", func(s replay.CaptureStats) int64 { return s.OverSize }},
	} {
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: "floodgate", Name: "capture_lines_total",
			Help:        "Requests recorded by -capture (written), not recorded because the writer was behind (dropped) or the file full (over_size).",
			ConstLabels: prometheus.Labels{"outcome": o.outcome},
		}, func() float64 { return float64(o.count(c.Stats())) }))
	}
	logger.Info("recording requests for floodgate replay", "capture", cfg.Path, "sample", opts.Sample, "max_bytes", opts.MaxBytes)
	return c, func() {
		if err := c.Close(); err != nil {
			logger.Error("capture: closing the file", "capture", cfg.Path, "err", err)
		}
		st := c.Stats()
		logger.Info("capture stopped", "capture", cfg.Path, "written", st.Written, "dropped", st.Dropped, "over_size", st.OverSize)
	}, nil
}
