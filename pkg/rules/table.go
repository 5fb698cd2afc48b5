package rules

import (
	"iter"
	"maps"
)

// smallTable is the size up to which a table scans a slice instead of
// hashing: comparing a few strings is cheaper than hashing one, and most
// rule levels have few keys and values.
const smallTable = 8

// table maps strings to values for the matching tree. It is filled while
// compiling and only read afterwards.
type table[V any] struct {
	small []tableEntry[V] // while len <= smallTable
	large map[string]V    // past it
}

type tableEntry[V any] struct {
	key string
	val V
}

func (t *table[V]) get(k string) (V, bool) {
	if t.large != nil {
		v, ok := t.large[k]
		return v, ok
	}
	for i := range t.small {
		if t.small[i].key == k {
			return t.small[i].val, true
		}
	}
	var zero V
	return zero, false
}

// put sets the value for a key not yet present.
func (t *table[V]) put(k string, v V) {
	if t.large != nil {
		t.large[k] = v
		return
	}
	t.small = append(t.small, tableEntry[V]{k, v})
	if len(t.small) > smallTable {
		t.large = make(map[string]V, len(t.small))
		for _, e := range t.small {
			t.large[e.key] = e.val
		}
		t.small = nil
	}
}

func (t *table[V]) size() int {
	if t.large != nil {
		return len(t.large)
	}
	return len(t.small)
}

// all yields every key and value, in no particular order.
func (t *table[V]) all() iter.Seq2[string, V] {
	if t.large != nil {
		return maps.All(t.large)
	}
	return func(yield func(string, V) bool) {
		for _, e := range t.small {
			if !yield(e.key, e.val) {
				return
			}
		}
	}
}
