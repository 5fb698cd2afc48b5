package examples_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	rpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"
)

// grpcurl makes a README grpcurl command's call the way grpcurl makes it,
// since Debian packages no grpcurl: everything it knows of the service
// comes from the server's reflection, as grpcurl's does. `grpcurl
// -plaintext ADDR list` prints the services reflection lists, sorted;
// `grpcurl -plaintext -d JSON ADDR SERVICE/METHOD` resolves the method and
// its message types through reflection, reads the request from JSON,
// calls, and prints the answer as JSON (spacing aside: sameOutput compares
// JSON as values). Any other form is an error, not a guess.
func (e *shellEnv) grpcurl(cmd string) (string, error) {
	args, err := shellFields(cmd)
	if err != nil {
		return "", err
	}
	var data string
	var plaintext bool
	var pos []string
	for i := 1; i < len(args); i++ {
		switch a := args[i]; {
		case a == "-plaintext":
			plaintext = true
		case a == "-d" && i+1 < len(args):
			i++
			data = args[i]
		case strings.HasPrefix(a, "-"):
			return "", fmt.Errorf("grpcurl flag %s: the test knows -plaintext and -d only", a)
		default:
			pos = append(pos, a)
		}
	}
	if !plaintext || len(pos) != 2 {
		return "", errors.New("want grpcurl -plaintext [-d JSON] ADDR (list | SERVICE/METHOD)")
	}
	addr, ok := e.addrs[pos[0]]
	if !ok {
		return "", fmt.Errorf("uses %s, which no part of the demo serves in the tests", pos[0])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return "", err
	}
	defer conn.Close()
	stream, err := rpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		return "", err
	}
	defer stream.CloseSend()
	ask := func(req *rpb.ServerReflectionRequest) (*rpb.ServerReflectionResponse, error) {
		if err := stream.Send(req); err != nil {
			return nil, err
		}
		resp, err := stream.Recv()
		if err != nil {
			return nil, err
		}
		if e := resp.GetErrorResponse(); e != nil {
			return nil, fmt.Errorf("reflection: %s", e.GetErrorMessage())
		}
		return resp, nil
	}
	resp, err := ask(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_ListServices{}})
	if err != nil {
		return "", err
	}
	var services []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		services = append(services, s.GetName())
	}
	slices.Sort(services)
	if pos[1] == "list" {
		return strings.Join(services, "\n") + "\n", nil
	}

	svc, method, ok := strings.Cut(pos[1], "/")
	if !ok || !slices.Contains(services, svc) {
		return "", fmt.Errorf("service %q: the server's reflection lists %q", svc, services)
	}
	resp, err = ask(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: svc}})
	if err != nil {
		return "", err
	}
	set := &descriptorpb.FileDescriptorSet{}
	for _, b := range resp.GetFileDescriptorResponse().GetFileDescriptorProto() {
		fd := &descriptorpb.FileDescriptorProto{}
		if err := proto.Unmarshal(b, fd); err != nil {
			return "", err
		}
		set.File = append(set.File, fd)
	}
	files, err := protodesc.NewFiles(set)
	if err != nil {
		return "", fmt.Errorf("the descriptors reflection sent: %w", err)
	}
	d, err := files.FindDescriptorByName(protoreflect.FullName(svc))
	if err != nil {
		return "", err
	}
	md := d.(protoreflect.ServiceDescriptor).Methods().ByName(protoreflect.Name(method))
	if md == nil {
		return "", fmt.Errorf("service %s has no method %s", svc, method)
	}
	in, out := dynamicpb.NewMessage(md.Input()), dynamicpb.NewMessage(md.Output())
	if err := protojson.Unmarshal([]byte(data), in); err != nil {
		return "", fmt.Errorf("-d: %w", err)
	}
	if err := conn.Invoke(ctx, "/"+svc+"/"+method, in, out); err != nil {
		return "", err
	}
	b, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(out)
	return string(b) + "\n", err
}

// shellFields splits a command line as the shell does for the quoting the
// README uses: blanks separate, single and double quotes group.
func shellFields(cmd string) ([]string, error) {
	var out []string
	var cur strings.Builder
	inField := false
	var quote rune
	for _, r := range cmd {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, inField = r, true
		case r == ' ' || r == '\t':
			if inField {
				out = append(out, cur.String())
				cur.Reset()
				inField = false
			}
		case strings.ContainsRune("|;&<>$`\\", r):
			return nil, fmt.Errorf("%q: the test runs grpcurl commands without a shell: no %c", cmd, r)
		default:
			cur.WriteRune(r)
			inField = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("%q: unterminated quote", cmd)
	}
	if inField {
		out = append(out, cur.String())
	}
	return out, nil
}

// sameOutput compares what a command printed with what the README shows:
// line by line as normalizeOutput makes them, or, when the README shows
// one JSON value over several lines (grpcurl's output), as JSON values,
// since the spacing of JSON printed by protojson varies.
func sameOutput(out string, want []string) bool {
	shown := strings.Join(want, "\n")
	if len(want) > 1 && strings.HasPrefix(shown, "{") {
		var w, g any
		if json.Unmarshal([]byte(shown), &w) == nil {
			return json.Unmarshal([]byte(out), &g) == nil && reflect.DeepEqual(scrub(g), scrub(w))
		}
	}
	return slices.Equal(normalizeOutput(out), normalizeOutput(shown))
}
