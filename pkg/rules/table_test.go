package rules

import (
	"sort"
	"strconv"
	"testing"
)

func TestTable(t *testing.T) {
	for _, n := range []int{0, 1, smallTable, smallTable + 1, 50} {
		var tb table[int]
		for i := 0; i < n; i++ {
			tb.put("k"+strconv.Itoa(i), i)
		}
		var keys []string
		for k := range tb.all() {
			keys = append(keys, k)
		}
		if tb.size() != n || len(keys) != n {
			t.Errorf("n=%d: size %d, %d keys", n, tb.size(), len(keys))
		}
		if (tb.large != nil) != (n > smallTable) {
			t.Errorf("n=%d: large = %v", n, tb.large != nil)
		}
		for i := 0; i < n; i++ {
			if v, ok := tb.get("k" + strconv.Itoa(i)); !ok || v != i {
				t.Errorf("n=%d: get(k%d) = %d, %v", n, i, v, ok)
			}
		}
		for _, miss := range []string{"", "k", "k" + strconv.Itoa(n), "K0"} {
			if v, ok := tb.get(miss); ok || v != 0 {
				t.Errorf("n=%d: get(%q) = %d, %v", n, miss, v, ok)
			}
		}
		sort.Strings(keys)
		for i := 1; i < len(keys); i++ {
			if keys[i] == keys[i-1] {
				t.Errorf("n=%d: key %q twice", n, keys[i])
			}
		}
	}
}
