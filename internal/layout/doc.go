// Package layout has no code: its test holds how floodgate's packages may
// import each other, the layering docs/architecture.md describes. Data
// flows one way, so imports point down only: pkg/ is a library and
// imports nothing under internal/; pkg/limit imports nothing of
// floodgate but pkg/internal/twin and pkg/rules only pkg/limit; the store and the live page do
// not import the listeners; and every package's imports of floodgate are
// listed in the test's table, so that an import pointing back up fails
// with a message naming it.
package layout
