//go:build processes

package redislimit_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/harness/redistest"
	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/redislimit"
)

// redisURL is where the examples find Redis, as a program would read it
// from its configuration: a private redis-server that TestMain starts.
var redisURL string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "redislimit-example-")
	if err != nil {
		log.Fatal(err)
	}
	srv, err := redistest.Run(dir)
	if err != nil {
		log.Fatal(err)
	}
	redisURL = "redis://" + srv.Addr
	code := m.Run()
	srv.Stop()
	os.RemoveAll(dir)
	os.Exit(code)
}

// A program limits each user to three requests a minute, counted in
// Redis, so that all its instances share the limit.
func Example() {
	client, err := redislimit.NewClient(redislimit.ClientConfig{URL: redisURL})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	limiter, err := redislimit.New(client, redislimit.Options{
		KeyPrefix: "example:",
		// How long a decision may take; 50 ms by default, under Envoy's
		// own timeout. A second here, for a machine too busy to keep that.
		Timeout: time.Second,
	})
	if err != nil {
		log.Fatal(err)
	}

	perUser := limit.Spec{Algorithm: limit.FixedWindow, Limit: 3, Window: time.Minute}
	hits := []limit.Hit{{Key: "user:alice", Spec: perUser, Cost: 1}}
	decisions := make([]limit.Decision, len(hits))
	for i := 1; i <= 4; i++ {
		blocked, err := limiter.Evaluate(context.Background(), hits, decisions)
		if err != nil {
			// Redis could not decide (err wraps redislimit.ErrStore):
			// the program chooses whether to let the request pass.
			log.Fatal(err)
		}
		fmt.Printf("request %d: blocked %t, %d left\n", i, blocked, decisions[0].Remaining)
	}
	// Output:
	// request 1: blocked false, 2 left
	// request 2: blocked false, 1 left
	// request 3: blocked false, 0 left
	// request 4: blocked true, 0 left
}
