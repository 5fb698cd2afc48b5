package rules

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// YAML syntax errors, placed where the problem is rather than where yaml.v3
// says its enclosing block starts.

// yamlLine finds the line number in a yaml.v3 error message.
func yamlLine(msg string) (line int, rest string, ok bool) {
	_, after, _ := strings.Cut(msg, "line ")
	rest = strings.TrimLeft(after, "0123456789")
	n, err := strconv.Atoi(after[:len(after)-len(rest)])
	if err != nil {
		return 0, msg, false
	}
	return n, strings.TrimPrefix(strings.TrimSpace(rest), ": "), true
}

// syntaxError records a YAML syntax error. yaml.v3 reports the line where
// the enclosing block starts; the first line at which a prefix of the file
// stops parsing is where the problem is, and is reported instead.
func (p *parser) syntaxError(data []byte, err error) {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line, rest, ok := yamlLine(msg)
	if !ok {
		p.errorf(badBytePos(p.file, data), "", "YAML syntax: %s", msg)
		return
	}
	lines := bytes.SplitAfter(data, []byte("\n"))
	if at := firstFailingLine(lines, line); at > line {
		rest += fmt.Sprintf(" (in the block from line %d)", line)
		line = at
	}
	col := 1
	if line >= 1 && line <= len(lines) {
		col += leadingSpaces(lines[line-1])
	}
	p.errorf(Position{File: p.file, Line: line, Column: col}, "", "YAML syntax: %s", rest)
}

// firstFailingLine returns the smallest n >= from such that the first n
// lines do not parse, by bisection, or from when none is found.
func firstFailingLine(lines [][]byte, from int) int {
	fails := func(n int) bool {
		var v yaml.Node
		return yaml.Unmarshal(bytes.Join(lines[:n], nil), &v) != nil
	}
	lo, hi := from, len(lines)
	if lo < 1 || lo > hi || !fails(hi) {
		return from
	}
	for lo < hi {
		mid := (lo + hi) / 2
		if fails(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// badBytePos returns the position of the first invalid UTF-8 sequence or
// control character of data, or 1:1 when there is none.
func badBytePos(file string, data []byte) Position {
	line, col := 1, 1
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		if (r == utf8.RuneError && size <= 1) || (r < 0x20 && r != '\n' && r != '\r' && r != '\t') || r == 0x7f {
			return Position{File: file, Line: line, Column: col}
		}
		if r == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
		i += size
	}
	return Position{File: file, Line: 1, Column: 1}
}
