package examples_test

import (
	"bytes"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/text"
)

// The README and the docs are read by goldmark, a CommonMark parser, in
// one place: the tests that run their commands, load their rule examples
// and follow their links all see the blocks and links a Markdown renderer
// sees.

// mdBlock is a fenced code block of a Markdown file.
type mdBlock struct {
	// line is the line of the opening fence, from 1.
	line int
	// lang is the first word of the info string: "sh", "console",
	// "yaml"; "" when there is none.
	lang string
	// section is the text of the nearest heading above the block, as
	// written ("Quick start").
	section string
	// lines is the block's content, a line per element, without the
	// fences and the newlines.
	lines []string
}

// body is the block's content as one text, ending in a newline.
func (b mdBlock) body() string { return strings.Join(b.lines, "\n") + "\n" }

// mdDoc is what the tests read of a Markdown file.
type mdDoc struct {
	path   string
	blocks []mdBlock
	// links are the destinations of the links and images, in order.
	links []string
}

// readMarkdown parses the Markdown file at path.
func readMarkdown(t testing.TB, path string) mdDoc {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := mdDoc{path: path}
	root := goldmark.DefaultParser().Parse(text.NewReader(src))
	section := ""
	err = ast.Walk(root, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch n := n.(type) {
		case *ast.Heading:
			section = strings.TrimSpace(string(n.Lines().Value(src)))
		case *ast.FencedCodeBlock:
			doc.blocks = append(doc.blocks, mdBlock{
				line:    1 + bytes.Count(src[:n.Pos()], []byte("\n")),
				lang:    string(n.Language(src)),
				section: section,
				lines:   blockLines(n, src),
			})
		case *ast.Link:
			doc.links = append(doc.links, string(n.Destination))
		case *ast.Image:
			doc.links = append(doc.links, string(n.Destination))
		}
		return ast.WalkContinue, nil
	})
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return doc
}

// blockLines returns the content of a fenced block, a line per element.
func blockLines(n *ast.FencedCodeBlock, src []byte) []string {
	lines := make([]string, 0, n.Lines().Len())
	for i := range n.Lines().Len() {
		seg := n.Lines().At(i)
		lines = append(lines, strings.TrimSuffix(string(seg.Value(src)), "\n"))
	}
	return lines
}

// localTarget returns the file a link destination names, without its
// fragment, and whether it names one: false for a fragment alone and for
// a URL with a scheme (https:, mailto:).
func localTarget(dest string) (string, bool) {
	u, err := url.Parse(dest)
	if err != nil || u.Scheme != "" || u.Path == "" {
		return "", false
	}
	return u.Path, true
}
