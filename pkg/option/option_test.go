package option_test

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/pkg/option"
)

func TestError(t *testing.T) {
	// A program's flags: its own name for some fields, the field's in
	// lower case for the others.
	flags := map[string]string{"NearLimitRatio": "-ratio", "Redis.TLS": "-redis-tls", "Redis.URL": "-redis"}
	flag := func(f string) string {
		if name, ok := flags[f]; ok {
			return name
		}
		return "-" + strings.ToLower(f)
	}
	for _, tc := range []struct {
		err        option.Error
		text, flag string
	}{
		{option.Error{Options: "envoy.Options", Field: "NearLimitRatio", Value: 2.0, Want: "want a number between 0 and 1"},
			"envoy.Options.NearLimitRatio 2: want a number between 0 and 1", "-ratio 2: want a number between 0 and 1"},
		{option.Error{Options: "x.Options", Field: "Addr", Value: "", Want: "want host:port"},
			`x.Options.Addr "": want host:port`, `-addr "": want host:port`},
		{option.Error{Options: "x.Options", Field: "Timeout", Value: -time.Second, Want: "must not be negative"},
			"x.Options.Timeout -1s: must not be negative", "-timeout -1s: must not be negative"},
		{option.Error{Options: "store.Options", Field: "Redis.TLS", Want: "needs %s (REDIS_URL)", With: []string{"Redis.URL"}},
			"store.Options.Redis.TLS needs store.Options.Redis.URL (REDIS_URL)", "-redis-tls needs -redis (REDIS_URL)"},
		{option.Error{Options: "store.Options", Field: "Redis.TLS", Also: []string{"Redis.Auth", "Redis.URL"}, Want: "are set"},
			"store.Options.Redis.TLS, store.Options.Redis.Auth and store.Options.Redis.URL are set", "-redis-tls, -redis.auth and -redis are set"},
		{option.Error{Options: "x.Options", Field: "File", Value: "f", Err: fs.ErrNotExist},
			`x.Options.File "f": file does not exist`, `-file "f": file does not exist`},
		{option.Error{Options: "x.Options", Field: "Addr", Value: "h", Want: "want host:port", Err: errors.New("missing port")},
			`x.Options.Addr "h": want host:port: missing port`, `-addr "h": want host:port: missing port`},
	} {
		if got := tc.err.Error(); got != tc.text {
			t.Errorf("Error() = %q, want %q", got, tc.text)
		}
		if got := tc.err.Message(flag); got != tc.flag {
			t.Errorf("Message(flag) = %q, want %q", got, tc.flag)
		}
	}
	wrapped := &option.Error{Options: "x.Options", Field: "File", Value: "f", Err: fs.ErrNotExist}
	if !errors.Is(wrapped, fs.ErrNotExist) {
		t.Error("errors.Is does not find Err")
	}
}

// A program that sets a package's options from flags of its own names
// the flag behind a refused field.
func ExampleError_Message() {
	err := error(&option.Error{Options: "envoy.Options", Field: "NearLimitRatio", Value: 2.0, Want: "want a number between 0 and 1"})
	fmt.Println(err)
	flags := map[string]string{"envoy.Options.NearLimitRatio": "-near-limit-ratio"}
	var oe *option.Error
	if errors.As(err, &oe) {
		fmt.Println(oe.Message(func(field string) string { return flags[oe.Options+"."+field] }))
	}
	// Output:
	// envoy.Options.NearLimitRatio 2: want a number between 0 and 1
	// -near-limit-ratio 2: want a number between 0 and 1
}
