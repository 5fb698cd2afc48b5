//go:build vtprotobuf

package envoy

import (
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// TestAnswersUseTheGeneratedEncoder: built with the vtprotobuf tag, as
// the Makefile and the Dockerfile build, an answer has go-control-plane's
// generated encoder under the method Marshal looks for. Without this test,
// a go-control-plane that renamed it would send every answer through
// reflection, still correct, and no other test would notice.
func TestAnswersUseTheGeneratedEncoder(t *testing.T) {
	var resp any = &pb.RateLimitResponse{}
	if _, ok := resp.(vtMarshaler); !ok {
		t.Fatalf("%T has no MarshalVTStrict: the codec would encode it by reflection", resp)
	}
}
