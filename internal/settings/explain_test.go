package settings

import (
	"errors"
	"io/fs"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/pkg/option"
)

// TestValidationNamesTheVariable checks that a value refused after parsing
// names the variable that set it, and nothing when a flag did.
func TestValidationNamesTheVariable(t *testing.T) {
	tests := []struct {
		args []string
		env  []string
		want string // the error's suffix
	}{
		{nil, []string{"NEAR_LIMIT_RATIO", "2"}, "want a number between 0 and 1 (set by NEAR_LIMIT_RATIO)"},
		{nil, []string{"REDIS_URL", "h:1", "REDIS_TYPE", "bogus"}, "want single, sentinel or cluster (set by REDIS_TYPE)"},
		{nil, []string{"REDIS_URL", "h:1", "FLOODGATE_REDIS_POOL_SIZE", "-3"}, "must not be negative (set by FLOODGATE_REDIS_POOL_SIZE)"},
		{nil, []string{"REDIS_URL", "h:1", "REDIS_PIPELINE_WINDOW", "-150us"}, "-redis-pipeline-window -150µs: must not be negative (set by REDIS_PIPELINE_WINDOW)"},
		{[]string{"-redis", "h:1", "-redis-pipeline-limit", "-1"}, nil, "-redis-pipeline-limit -1: must not be negative"},
		{nil, []string{"REDIS_URL", "h:1", "REDIS_PERSECOND", "true", "REDIS_PERSECOND_URL", "h:2", "REDIS_PERSECOND_PIPELINE_LIMIT", "-2"}, "-redis-persecond-pipeline-limit -2: must not be negative (set by REDIS_PERSECOND_PIPELINE_LIMIT)"},
		{[]string{"-near-limit-ratio", "3"}, nil, "want a number between 0 and 1"},
		{nil, []string{"PORT", "abc"}, `-http-addr ":abc": port "abc": want a number from 0 to 65535 (set by HOST/PORT)`},
		{nil, []string{"GRPC_PORT", "99999"}, `port "99999": want a number from 0 to 65535 (set by GRPC_HOST/GRPC_PORT)`},
		{[]string{"-debug-addr", "localhost"}, nil, `-debug-addr "localhost": want host:port`},
	}
	for _, tc := range tests {
		_, err := Load(tc.args, envOf(tc.env...))
		if err == nil || !strings.HasSuffix(err.Error(), tc.want) {
			t.Errorf("args %q env %q: err = %v, want it to end with %q", tc.args, tc.env, err, tc.want)
		}
	}
}

// TestExplain: a package's option.Error is worded with the flags of the
// settings that land in its fields, by lookup, and the variables that set
// them; an error no setting is behind is returned as it is.
func TestExplain(t *testing.T) {
	c := &Config{From: map[string]string{"near-limit-ratio": "NEAR_LIMIT_RATIO", "capture": "FLOODGATE_CAPTURE", "dogstatsd-mogrifiers": "USE_DOG_STATSD_MOGRIFIERS"}}
	ratio := &option.Error{Options: "envoy.Options", Field: "NearLimitRatio", Value: 2.0, Want: "want a number between 0 and 1"}
	noSink := &option.Error{Options: "statsd.Options", Field: "NoServer", Want: "sends the stats nowhere without %s", With: []string{"Sink"}}
	plain := errors.New("redis: connection refused")
	for _, tc := range []struct {
		err  error
		want string
	}{
		{ratio, "-near-limit-ratio 2: want a number between 0 and 1 (set by NEAR_LIMIT_RATIO)"},
		{&option.Error{Options: "statsd.Options", Field: "Mogrifiers", Want: "rename DogStatsD stats; they need %s", With: []string{"DogStatsD"}},
			"-dogstatsd-mogrifiers rename DogStatsD stats; they need -dogstatsd (set by USE_DOG_STATSD_MOGRIFIERS)"},
		{&option.Error{Options: "server.Options", Field: "MaxReportBytes", Value: 5, Want: "want at least %s", With: []string{"MaxMessageBytes"}},
			"-rlqs-max-report-bytes 5: want at least -max-message-bytes"},
		{c.FlagError("capture", fs.ErrPermission), "-capture: permission denied (set by FLOODGATE_CAPTURE)"},
		{noSink, noSink.Error()},
		{plain, plain.Error()},
	} {
		got := c.Explain(tc.err)
		if got.Error() != tc.want {
			t.Errorf("Explain(%q) = %q, want %q", tc.err, got, tc.want)
		}
		if !errors.Is(got, tc.err) {
			t.Errorf("Explain(%q) does not wrap it", tc.err)
		}
	}
	if c.Explain(nil) != nil {
		t.Error("Explain(nil) is not nil")
	}
}

// TestEverySettingFoundByItsField: each setting that lands in a package's
// options is the one settingOf finds for its field, but where two settings
// share a field (the first is then named).
func TestEverySettingFoundByItsField(t *testing.T) {
	for i := range Table {
		s := &Table[i]
		p, typ, field := s.option()
		if p == "" {
			continue
		}
		got, c := settingOf(p+"."+typ, field), &Config{}
		if got == nil || got != s && got.At(c) != s.At(c) {
			t.Errorf("-%s lands in %s.%s.%s; settingOf finds %v", s.Flag, p, typ, field, got)
		}
	}
}
