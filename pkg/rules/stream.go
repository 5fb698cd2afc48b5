package rules

import (
	"bytes"
	"slices"
)

// A rule file is parsed a slice at a time where its layout allows: the
// items of its top-level descriptors list are cut into runs of whole items,
// each parsed into a YAML tree of its own and compiled before the next is
// parsed, since yaml.v3's tree is many times the size of its text
// (docs/benchmarks.md, pkg/rules). The rest of the file, the header, is
// parsed with the items' lines left blank, so positions stay the file's.
//
// Items are the lines at the list's indentation that start with "- ";
// what lies between two is more indented, blank or a comment. A file whose
// layout leaves doubt (a flow list, a tab or a lesser indentation, line
// breaks other than \n and \r\n) is parsed whole, and so is one with a
// slice that does not parse alone (an anchor defined in another slice):
// a file always means what the whole file gives.

// sliceBytes is about how much text one slice holds.
const sliceBytes = 64 << 10

// layout is a file's top-level descriptors list, cut into slices.
type layout struct {
	header []byte // the file with the items' lines blank
	line   int    // the line of the "descriptors:" key, from 1
	slices []itemSlice
}

// itemSlice is a run of whole items.
type itemSlice struct {
	start, end int // byte offsets in the file
	line       int // where it starts, from 1
	items      int
}

// cutItems cuts data's top-level descriptors list into slices of at least
// size bytes (but the last), or returns false when the file is to be
// parsed whole.
func cutItems(data []byte, size int) (*layout, bool) {
	if hasOtherBreaks(data) {
		return nil, false
	}
	lay := &layout{}
	blockStart, blockEnd := -1, len(data)
	indent := -1
	var cur *itemSlice
lines:
	for start, num := 0, 1; start < len(data); num++ {
		text, _, _ := bytes.Cut(data[start:], []byte("\n"))
		lineStart := start
		start += len(text) + 1
		if blockStart < 0 {
			if isDescriptorsKey(text) {
				lay.line, blockStart = num, start
			}
			continue
		}
		if isBlankOrComment(text) {
			continue
		}
		n := leadingSpaces(text)
		if indent < 0 {
			indent = n // the first item sets the list's indentation
		}
		switch {
		case n == indent && isItemStart(text[n:]):
			if cur == nil || cur.end-cur.start >= size {
				lay.slices = append(lay.slices, itemSlice{start: lineStart, line: num})
				cur = &lay.slices[len(lay.slices)-1]
			}
			cur.items++
		case n > indent && cur != nil:
			// Inside the current item.
		case n == 0 && cur != nil:
			blockEnd = lineStart // the next top-level line ends the list
			break lines
		default:
			return nil, false // a tab, a lesser indentation, no item first
		}
		cur.end = start
	}
	if len(lay.slices) == 0 {
		return nil, false
	}
	last := &lay.slices[len(lay.slices)-1]
	last.end = min(blockEnd, len(data)) // trailing blank and comment lines
	for i := range lay.slices[:len(lay.slices)-1] {
		lay.slices[i].end = lay.slices[i+1].start
	}
	// The lines between the key and the first item go with it: every byte
	// is parsed somewhere, since a comment can hold invalid UTF-8.
	lay.slices[0].start, lay.slices[0].line = blockStart, lay.line+1
	lay.header = blankLines(data, blockStart, blockEnd)
	return lay, true
}

// blankLines returns a copy of data in which the lines of [from, to) are
// empty, so that the lines after them keep their numbers.
func blankLines(data []byte, from, to int) []byte {
	from, to = min(from, len(data)), min(to, len(data))
	blank := bytes.Repeat([]byte{'\n'}, bytes.Count(data[from:to], []byte{'\n'}))
	return slices.Concat(data[:from], blank, data[to:])
}

// hasOtherBreaks reports whether data holds a line break yaml.v3 counts
// other than "\n" and "\r\n": a lone "\r", NEL, LS or PS.
func hasOtherBreaks(data []byte) bool {
	return bytes.Count(data, []byte("\r")) != bytes.Count(data, []byte("\r\n")) ||
		bytes.Contains(data, []byte("\u0085")) || bytes.Contains(data, []byte("\u2028")) ||
		bytes.Contains(data, []byte("\u2029"))
}

// isDescriptorsKey reports whether a line is the top-level key
// "descriptors:" with no value on the line (a comment may follow).
func isDescriptorsKey(line []byte) bool {
	rest, ok := bytes.CutPrefix(line, []byte("descriptors:"))
	if !ok || len(rest) > 0 && rest[0] != ' ' && rest[0] != '\t' && rest[0] != '\r' {
		return false // "descriptors:x" is not that key
	}
	rest = bytes.TrimLeft(rest, " \t")
	return len(rest) == 0 || rest[0] == '#' || string(rest) == "\r"
}

// isItemStart reports whether text, a line after its indentation, starts
// an item of a block list: "-" then a space or the end of the line.
func isItemStart(text []byte) bool {
	return len(text) > 0 && text[0] == '-' &&
		(len(text) == 1 || text[1] == ' ' || string(text[1:]) == "\r")
}

// isBlankOrComment reports whether a line holds only spaces and tabs, or
// a comment after them.
func isBlankOrComment(line []byte) bool {
	rest := bytes.TrimLeft(line, " \t")
	return len(rest) == 0 || rest[0] == '#' || string(rest) == "\r"
}

// leadingSpaces returns the number of spaces a line starts with.
func leadingSpaces(line []byte) int { return len(line) - len(bytes.TrimLeft(line, " ")) }
