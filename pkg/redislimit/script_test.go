package redislimit

import (
	"fmt"
	"io/fs"
	"math/bits"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/pkg/internal/twin"
	"github.com/floodgate/floodgate/pkg/limit"
)

// luaToken is a token of a Lua source: a name, a number or a symbol, with
// strings and comments left out.
type luaToken struct {
	kind byte // 'n' name, '0' number, 's' symbol
	text string
	line int
}

var luaLexeme = regexp.MustCompile(`^(?:` +
	`--\[(=*)\[|--[^\n]*|\[(=*)\[|` + // comments and long strings (closed below)
	`"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*'|` + // strings
	`(0[xX][0-9a-fA-F]+|[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?|\.[0-9]+)|` + // numbers
	`([A-Za-z_][A-Za-z0-9_]*)|` + // names
	`(\.\.\.|\.\.|==|~=|<=|>=|\S))`) // symbols

// luaTokens splits src into tokens; it fails t on what it cannot read.
func luaTokens(t *testing.T, name, src string) []luaToken {
	t.Helper()
	var out []luaToken
	line := 1
	for len(src) > 0 {
		if c := src[0]; c == ' ' || c == '\t' || c == '\r' || c == '\n' {
			if c == '\n' {
				line++
			}
			src = src[1:]
			continue
		}
		m := luaLexeme.FindStringSubmatchIndex(src)
		if m == nil {
			t.Fatalf("%s:%d: cannot read %.20q", name, line, src)
		}
		lex := src[:m[1]]
		switch {
		case m[2] >= 0 || m[4] >= 0: // a long comment or string: skip to its close
			eq := src[m[2]:m[3]]
			if m[4] >= 0 {
				eq = src[m[4]:m[5]]
			}
			end := strings.Index(src[m[1]:], "]"+eq+"]")
			if end < 0 {
				t.Fatalf("%s:%d: unclosed long bracket", name, line)
			}
			lex = src[:m[1]+end+len(eq)+2]
		case m[6] >= 0:
			out = append(out, luaToken{'0', lex, line})
		case m[8] >= 0:
			out = append(out, luaToken{'n', lex, line})
		case m[10] >= 0:
			out = append(out, luaToken{'s', lex, line})
		}
		line += strings.Count(lex, "\n")
		src = src[len(lex):]
	}
	return out
}

var luaKeywords = strings.Fields(`and break do else elseif end false for function if in local nil not or
	repeat return then true until while`)

// luaGlobals are the names Redis's Lua gives every script.
var luaGlobals = strings.Fields(`KEYS ARGV redis string math table tonumber tostring type pairs ipairs
	error pcall unpack select next assert setmetatable getmetatable rawget rawset cjson bit`)

// luaFree returns the names src uses without defining them (as a local, a
// parameter or a loop variable anywhere in the file: a file is small
// enough that scopes do not hide a name from its reader), and the fields
// it reads of the tables named in tables.
func luaFree(toks []luaToken, tables ...string) (free map[string]int, fields map[string][]string) {
	declared := map[string]bool{}
	for i := 0; i < len(toks); i++ {
		switch toks[i].text {
		case "local", "for":
			for j := i + 1; j < len(toks); j++ {
				if toks[j].kind == 'n' && toks[j].text != "function" {
					declared[toks[j].text] = true
				} else if toks[j].text != "," && toks[j].text != "function" {
					break
				}
			}
		case "function":
			j := i + 1
			for j < len(toks) && toks[j].text != "(" {
				j++
			}
			for ; j < len(toks) && toks[j].text != ")"; j++ {
				if toks[j].kind == 'n' {
					declared[toks[j].text] = true
				}
			}
		}
	}
	free, fields = map[string]int{}, map[string][]string{}
	depth := 0
	for i, tok := range toks {
		switch tok.text {
		case "{":
			depth++
		case "}":
			depth--
		}
		if tok.kind != 'n' || slices.Contains(luaKeywords, tok.text) {
			continue
		}
		if i > 0 && (toks[i-1].text == "." || toks[i-1].text == ":") {
			if slices.Contains(tables, toks[i-2].text) {
				fields[toks[i-2].text] = append(fields[toks[i-2].text], tok.text)
			}
			continue
		}
		if depth > 0 && i+1 < len(toks) && toks[i+1].text == "=" {
			continue // a key of a table constructor
		}
		if !declared[tok.text] && !slices.Contains(luaGlobals, tok.text) {
			if _, ok := free[tok.text]; !ok {
				free[tok.text] = tok.line
			}
		}
	}
	return free, fields
}

// luaSources returns every embedded Lua file by name, tokenized.
func luaSources(t *testing.T) map[string][]luaToken {
	t.Helper()
	names, err := fs.Glob(luaFiles, "lua/*.lua")
	if err != nil || len(names) == 0 {
		t.Fatalf("no Lua files: %v", err)
	}
	out := map[string][]luaToken{}
	for _, n := range names {
		out[strings.TrimPrefix(n, "lua/")] = luaTokens(t, n, mustRead(strings.TrimPrefix(n, "lua/")))
	}
	return out
}

// TestLuaFilesUseOnlyWhatTheyReceive holds every Lua file to the contract
// of scriptSource: it uses only its own names, Lua's and Redis's, and what
// it receives (common.lua MAX_COUNT, an algorithm file C and K, the driver
// the constants, C, K and loaders); and the fields it reads of C and K
// exist (C is what common.lua returns, K the generated constants).
func TestLuaFilesUseOnlyWhatTheyReceive(t *testing.T) {
	src := luaSources(t)
	var consts []string
	for _, c := range luaConstants() {
		consts = append(consts, c.name)
	}
	// What common.lua exports: the keys of the table it ends by returning.
	common := src["common.lua"]
	ret := len(common) - 1
	for ret >= 0 && common[ret].text != "return" {
		ret--
	}
	var helpers []string
	for i := ret; i+1 < len(common); i++ {
		if common[i].kind == 'n' && common[i+1].text == "=" {
			helpers = append(helpers, common[i].text)
		}
	}
	if len(helpers) == 0 {
		t.Fatal("common.lua does not end by returning its helpers")
	}
	receives := map[string][]string{"common.lua": {"MAX_COUNT"}, "evaluate.lua": append([]string{"C", "K", "loaders"}, consts...)}
	for _, a := range limit.Algorithms() {
		receives[a.String()+".lua"] = []string{"C", "K"}
	}
	for name, toks := range src {
		recv, ok := receives[name]
		if !ok {
			t.Errorf("%s: a Lua file scriptSource does not compose", name)
			continue
		}
		free, fields := luaFree(toks, "C", "K")
		for n, line := range free {
			if !slices.Contains(recv, n) {
				t.Errorf("%s:%d: uses %s, which it neither defines nor receives", name, line, n)
			}
		}
		for _, f := range fields["C"] {
			if !slices.Contains(helpers, f) {
				t.Errorf("%s: reads C.%s, which common.lua does not return", name, f)
			}
		}
		for _, f := range fields["K"] {
			if !slices.Contains(consts, f) {
				t.Errorf("%s: reads K.%s, which is no generated constant", name, f)
			}
		}
		// Every file starts with its header comment (KEYS, ARGV, return, semantics).
		if !strings.HasPrefix(mustRead(name), "-- ") {
			t.Errorf("%s: no header comment", name)
		}
	}
}

// TestLuaFilesSpellNoConstant fails when a Lua file writes out a number
// the generated constants stand for: an argument count, a flag, a field
// offset, an algorithm code, GCRA's epoch. Only 0, 1 and 2 are too common
// to tell, plus the literals listed here with their meaning.
func TestLuaFilesSpellNoConstant(t *testing.T) {
	allowed := map[string][]string{
		"sliding_log.lua": {"8"},       // FIRST: entries a walk reads first
		"evaluate.lua":    {"3", "16"}, // PER_CHARGE: a charge's fields; FIXED_MAX: hits of the fast path
	}
	contract := map[string][]string{}
	for _, c := range luaConstants() {
		if c.value > 2 {
			v := strconv.FormatInt(c.value, 10)
			contract[v] = append(contract[v], c.name)
		}
	}
	for name, toks := range luaSources(t) {
		for _, tok := range toks {
			if tok.kind == '0' && contract[tok.text] != nil && !slices.Contains(allowed[name], tok.text) {
				t.Errorf("%s:%d: literal %s where a constant belongs (one of %v)", name, tok.line, tok.text, contract[tok.text])
			}
			// The names of the hand-kept copies this contract replaced.
			if tok.kind == 'n' && slices.Contains([]string{"NFIXED", "NCAL", "epoch_us"}, tok.text) {
				t.Errorf("%s:%d: %s, a hand-kept copy of a generated constant", name, tok.line, tok.text)
			}
		}
	}
}

// TestScriptStartsWithConstants checks the generated block: it opens the
// script, states every constant with its Go value, and the flags are
// distinct bits below flagQuotaBase, as the script's decoding needs.
func TestScriptStartsWithConstants(t *testing.T) {
	src := evaluateSource
	lines := strings.Split(src, "\n")
	if !strings.HasPrefix(lines[0], "-- ") {
		t.Fatalf("script starts with %q, want the constants block's comment", lines[0])
	}
	cs := luaConstants()
	for i, c := range cs {
		if want := fmt.Sprintf("local %s = %d", c.name, c.value); lines[1+i] != want {
			t.Errorf("script line %d = %q, want %q", 2+i, lines[1+i], want)
		}
	}
	want := map[string]int64{
		"ALG_FIXED_WINDOW": 0, "ALG_SLIDING_WINDOW": 1, "ALG_SLIDING_LOG": 2, "ALG_TOKEN_BUCKET": 3,
		"ALG_LEAKY_BUCKET": 4, "ALG_GCRA": 5, "GCRA_EPOCH": twin.GCRAEpoch, "FIELDS_PER_DECISION": 6,
	}
	for _, c := range cs {
		if v, ok := want[c.name]; ok && v != c.value {
			t.Errorf("%s = %d, want %d", c.name, c.value, v)
		}
	}
	flags := []int64{flagRefund, flagAdvisory, flagCalendar, flagUsage}
	var seen int64
	for _, f := range flags {
		if bits.OnesCount64(uint64(f)) != 1 || f&seen != 0 || f >= flagQuotaBase {
			t.Errorf("flag %d is not a bit of its own below flagQuotaBase %d", f, flagQuotaBase)
		}
		seen |= f
	}
	if seen >= flagQuotaBase {
		t.Errorf("flags %b reach flagQuotaBase %d", seen, flagQuotaBase)
	}
	if fieldDebt != fieldsPerDecision-1 {
		t.Errorf("fieldDebt %d is not the last of %d fields", fieldDebt, fieldsPerDecision)
	}
}
