package redislimit_test

import (
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/redislimit"
	"github.com/redis/go-redis/v9"
)

// hasLibrary returns an error unless c's node holds this build's library.
func hasLibrary(ctx context.Context, c *redis.Client) error {
	libs, err := c.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: redislimit.FunctionName()}).Result()
	if err != nil {
		return err
	}
	if len(libs) != 1 || len(libs[0].Functions) != 1 || libs[0].Functions[0].Name != redislimit.FunctionName() {
		return fmt.Errorf("%s: libraries %+v, want %s with its one function", c.Options().Addr, libs, redislimit.FunctionName())
	}
	return nil
}

// TestFunctionName: the library and its function are named after the hash
// of the Lua code, so that two versions sharing a Redis never call each
// other's code.
func TestFunctionName(t *testing.T) {
	sha, function := redislimit.Script()
	if want := "floodgate_" + sha; function != want || redislimit.FunctionName() != want {
		t.Errorf("Script() function = %q, FunctionName() = %q, want %q", function, redislimit.FunctionName(), want)
	}
	if want := "#!lua name=" + function + "\n"; !strings.HasPrefix(redislimit.LibrarySource(), want) {
		t.Errorf("library starts with %.60q, want %q", redislimit.LibrarySource(), want)
	}
}

// syncBuffer is a bytes.Buffer safe for a logger shared by goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestFunctionMode runs a Limiter against a Redis that offers functions,
// and against users whose ACL denies FUNCTION LOAD or FCALL: the first
// loads the library once and sends FCALL only, also after the library
// is lost (FUNCTION FLUSH: one "not found", one load, the call again);
// the others use EVALSHA for good, say so once in the log, and still
// recover from a lost script (SCRIPT FLUSH: one NOSCRIPT, one EVAL). The
// decisions are the same either way.
func TestFunctionMode(t *testing.T) {
	n := startNode(t)
	for _, tc := range []struct {
		name     string
		acl      []string // rules of the ACL user, none for the default user
		function bool     // FCALL expected
	}{
		{"functions", nil, true},
		{"FUNCTION denied", []string{"-function"}, false},
		{"FCALL denied", []string{"-fcall"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := n.client
			if tc.acl != nil {
				user := strings.ReplaceAll(tc.name, " ", "-")
				if _, err := n.srv.Do(append([]string{"ACL", "SETUSER", user, "reset", "on", ">pw", "~*", "+@all"}, tc.acl...)...); err != nil {
					t.Fatal(err)
				}
				client = redis.NewClient(&redis.Options{Addr: n.srv.Addr, Username: user, Password: "pw", ContextTimeoutEnabled: true})
				t.Cleanup(func() { client.Close() })
			}
			for _, c := range []string{"FUNCTION", "SCRIPT"} {
				if _, err := n.srv.Do(c, "FLUSH"); err != nil {
					t.Fatal(err)
				}
			}
			var logs syncBuffer
			l, err := redislimit.New(client, redislimit.Options{KeyPrefix: "mode:" + tc.name + ":", Timeout: 5 * time.Second,
				Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			hit := limit.Hit{Key: "k", Spec: limit.Spec{Algorithm: limit.FixedWindow, Limit: 100, Window: time.Hour}, Cost: 1}
			if _, err := n.srv.Do("CONFIG", "RESETSTAT"); err != nil {
				t.Fatal(err)
			}
			remaining := int64(100)
			check := func(when string) {
				t.Helper()
				remaining--
				if d := decide(t, l, hit)[0]; !d.Allowed || d.Remaining != remaining {
					t.Fatalf("%s: %+v, want allowed with %d remaining", when, d, remaining)
				}
			}
			for range 3 {
				check("first calls")
			}
			flush := "SCRIPT"
			if tc.function {
				flush = "FUNCTION"
			}
			if _, err := n.srv.Do(flush, "FLUSH"); err != nil {
				t.Fatal(err)
			}
			for range 3 {
				check("after " + flush + " FLUSH")
			}
			calls := map[string]string{}
			for _, c := range []string{"fcall", "evalsha", "eval", "function|load"} {
				calls[c] = commandCalls(t, n.srv, c)
			}
			want := map[string]string{"fcall": "7", "evalsha": "0", "eval": "0", "function|load": "2"}
			if !tc.function {
				// Commands refused by ACL are not counted as calls: a
				// refused FUNCTION LOAD, or a loaded library and a refused
				// FCALL; then EVALSHA, with one NOSCRIPT and one EVAL at the
				// first call and after the flush.
				want = map[string]string{"fcall": "0", "evalsha": "6", "eval": "2", "function|load": "0"}
				if tc.name == "FCALL denied" {
					want["function|load"] = "1"
				}
			}
			for c, w := range want {
				if calls[c] != w {
					t.Errorf("%s ran %s times, want %s (all: %v)", c, calls[c], w, calls)
				}
			}
			log := logs.String()
			if tc.function {
				if strings.Count(log, "FCALL") != 1 || !strings.Contains(log, redislimit.FunctionName()) {
					t.Errorf("log %q, want one line naming FCALL and %s", log, redislimit.FunctionName())
				}
			} else if strings.Count(log, "level=WARN") != 1 || !strings.Contains(log, "EVALSHA") || !strings.Contains(log, "NOPERM") {
				t.Errorf("log %q, want one warning naming EVALSHA and NOPERM", log)
			}
		})
	}
}

// TestFunctionModeKeyDenied: an ACL that denies a user some keys, not
// FCALL, fails the calls on those keys with its NOPERM and nothing else:
// the Limiter keeps FCALL for the keys it may use, rather than taking the
// refusal for one of functions and sending every later call by EVALSHA.
func TestFunctionModeKeyDenied(t *testing.T) {
	n := startNode(t)
	const prefix = "mode-keys:"
	if _, err := n.srv.Do("ACL", "SETUSER", "somekeys", "reset", "on", ">pw", "~"+prefix+"*open", "+@all"); err != nil {
		t.Fatal(err)
	}
	client := redis.NewClient(&redis.Options{Addr: n.srv.Addr, Username: "somekeys", Password: "pw", ContextTimeoutEnabled: true})
	t.Cleanup(func() { client.Close() })
	l, err := redislimit.New(client, redislimit.Options{KeyPrefix: prefix, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	spec := limit.Spec{Algorithm: limit.FixedWindow, Limit: 100, Window: time.Hour}
	if _, err := n.srv.Do("CONFIG", "RESETSTAT"); err != nil {
		t.Fatal(err)
	}
	decide(t, l, limit.Hit{Key: "open", Spec: spec, Cost: 1})
	_, err = l.Evaluate(context.Background(), []limit.Hit{{Key: "closed", Spec: spec, Cost: 1}}, make([]limit.Decision, 1))
	if err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Fatalf("a call on a key the ACL denies: %v, want its NOPERM", err)
	}
	if d := decide(t, l, limit.Hit{Key: "open", Spec: spec, Cost: 1})[0]; !d.Allowed || d.Remaining != 98 {
		t.Fatalf("the allowed key again: %+v, want allowed with 98 remaining", d)
	}
	got := map[string]string{}
	for _, c := range []string{"fcall", "evalsha", "eval"} {
		got[c] = commandCalls(t, n.srv, c)
	}
	if want := map[string]string{"fcall": "2", "evalsha": "0", "eval": "0"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("calls %v, want %v: FCALL kept after a key's refusal", got, want)
	}
}

// TestFunctionModeConcurrentStart: many calls at once on a Limiter that
// has not decided yet are all answered, exactly (the ones that do not
// wait for the decision use EVALSHA), and the library is loaded once.
func TestFunctionModeConcurrentStart(t *testing.T) {
	n := startNode(t)
	l, err := redislimit.New(n.client, redislimit.Options{KeyPrefix: "start:", Timeout: 5 * time.Second,
		Batch: redislimit.BatchOptions{Disabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	const callers, limitN = 32, 20
	hit := limit.Hit{Key: "k", Spec: limit.Spec{Algorithm: limit.FixedWindow, Limit: limitN, Window: time.Hour}, Cost: 1}
	var wg sync.WaitGroup
	var mu sync.Mutex
	allowed := 0
	for range callers {
		wg.Go(func() {
			d := make([]limit.Decision, 1)
			if _, err := l.Evaluate(context.Background(), []limit.Hit{hit}, d); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			allowed += b2i(d[0].Allowed)
			mu.Unlock()
		})
	}
	wg.Wait()
	if allowed != limitN {
		t.Errorf("%d of %d calls allowed, want %d", allowed, callers, limitN)
	}
	if got := commandCalls(t, n.srv, "function|load"); got != "1" {
		t.Errorf("FUNCTION LOAD ran %s times, want 1", got)
	}
	if err := hasLibrary(context.Background(), n.client); err != nil {
		t.Error(err)
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestFunctionModeRedisDownAtStart: a Limiter whose Redis is down when its
// first calls come decides once Redis is back: the calls fail meanwhile,
// then succeed (with EVALSHA until the next attempt to load the library,
// at most a second later), and then use FCALL; a Redis restarted empty
// (no library) is handled the same way.
func TestFunctionModeRedisDownAtStart(t *testing.T) {
	n := startNode(t)
	n.srv.Stop()
	l, err := redislimit.New(n.client, redislimit.WithBreaker(redislimit.Options{KeyPrefix: "down:", Timeout: 200 * time.Millisecond},
		redislimit.BreakerOptions{Failures: -1}))
	if err != nil {
		t.Fatal(err)
	}
	hit := limit.Hit{Key: "k", Spec: limit.Spec{Algorithm: limit.FixedWindow, Limit: 100, Window: time.Hour}, Cost: 1}
	d := make([]limit.Decision, 1)
	if _, err := l.Evaluate(context.Background(), []limit.Hit{hit}, d); !errors.Is(err, redislimit.ErrStore) {
		t.Fatalf("Redis down: err = %v, want ErrStore", err)
	}
	n.srv.Restart()
	remaining := int64(100)
	for deadline := time.Now().Add(3 * time.Second); commandCalls(t, n.srv, "fcall") == "0"; {
		if time.Now().After(deadline) {
			t.Fatal("no FCALL 3 s after Redis came back")
		}
		remaining--
		if d := decide(t, l, hit)[0]; d.Remaining != remaining {
			t.Fatalf("remaining %d, want %d", d.Remaining, remaining)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := hasLibrary(context.Background(), n.client); err != nil {
		t.Error(err)
	}
	if got := commandCalls(t, n.srv, "function|load"); got != "1" {
		t.Errorf("FUNCTION LOAD ran %s times, want 1", got)
	}
}

func TestScriptSHA(t *testing.T) {
	sum := sha1.Sum([]byte(redislimit.ScriptSource()))
	if got, _ := redislimit.Script(); got != hex.EncodeToString(sum[:]) {
		t.Fatalf("Script() sha = %s, want %s", got, hex.EncodeToString(sum[:]))
	}
}
