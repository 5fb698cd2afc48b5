package server

import (
	"bytes"
	"encoding/binary"
	"net"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/proto"

	commonpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
)

// TestNoFlowControlPings sends decisions one after another on one HTTP/2
// connection, as Envoy does below a few thousand a second, and reads every
// frame the server writes. With grpc-go's estimated windows the server
// sent a PING and a window update after each request's DATA: frames that
// cost a write and a read on both sides of every decision. The stream
// window it announces is FlowWindow.
func TestNoFlowControlPings(t *testing.T) {
	s, _ := running(t, Options{})
	c, err := net.Dial("tcp", s.Addrs().GRPC.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	const requests = 5
	var pings, windowUpdates int
	window := uint32(0)
	for i := range requests {
		stream := uint32(2*i + 1)
		writeDecision(t, fr, stream)
		for ended := false; !ended; {
			f, err := fr.ReadFrame()
			if err != nil {
				t.Fatalf("request %d: %v", i+1, err)
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					if v, ok := f.Value(http2.SettingInitialWindowSize); ok {
						window = v
					}
					fr.WriteSettingsAck()
				}
			case *http2.PingFrame:
				if !f.IsAck() {
					pings++
					fr.WritePing(true, f.Data)
				}
			case *http2.WindowUpdateFrame:
				if i > 0 { // the first widens the connection's window
					windowUpdates++
				}
			case *http2.HeadersFrame:
				ended = f.StreamID == stream && f.StreamEnded()
			}
		}
	}
	if pings != 0 || windowUpdates != 0 || window != FlowWindow {
		t.Errorf("after %d decisions: %d PINGs and %d window updates after the first from the server, stream window %d; want none, none and %d",
			requests, pings, windowUpdates, window, FlowWindow)
	}
}

// writeDecision writes one ShouldRateLimit call on stream: its headers,
// then its message in one DATA frame that ends the stream.
func writeDecision(t *testing.T, fr *http2.Framer, stream uint32) {
	t.Helper()
	var hdr bytes.Buffer
	enc := hpack.NewEncoder(&hdr)
	for _, f := range [][2]string{
		{":method", "POST"}, {":scheme", "http"}, {":authority", "floodgate"},
		{":path", "/" + pb.RateLimitService_ServiceDesc.ServiceName + "/ShouldRateLimit"},
		{"content-type", "application/grpc"}, {"te", "trailers"},
	} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	msg, err := proto.Marshal(&pb.RateLimitRequest{Domain: "srv", Descriptors: []*commonpb.RateLimitDescriptor{
		{Entries: []*commonpb.RateLimitDescriptor_Entry{{Key: "user", Value: "u"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	body := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(msg)))
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: stream, BlockFragment: hdr.Bytes(), EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteData(stream, true, append(body, msg...)); err != nil {
		t.Fatal(err)
	}
}
