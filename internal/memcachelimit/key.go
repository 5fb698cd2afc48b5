package memcachelimit

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
)

// MaxKeyLen is the longest key Memcached accepts, in bytes.
const MaxKeyLen = 250

// MaxPrefixLen is the longest Options.KeyPrefix New accepts, so that
// every key's hashed form fits in MaxKeyLen.
const MaxPrefixLen = 128

// AppendKey appends to dst the Memcached key of counter (a limit.Hit.Key)
// in the fixed window that starts at start (µs since the Unix epoch).
//
// The key is prefix, start in decimal, ':' and counter, with '%' and
// every byte a key cannot carry (space, control characters, above 0x7e)
// written as '%' and two upper-case hex digits; when that is longer than
// MaxKeyLen, prefix, start, '#' and the hex SHA-256 of counter. For a
// fixed valid prefix (validPrefix) the first form is injective, and the
// second collides only where SHA-256 does.
func AppendKey(dst []byte, prefix string, start int64, counter string) []byte {
	from := len(dst)
	dst = append(dst, prefix...)
	dst = strconv.AppendInt(dst, start, 10)
	if len(dst)-from+1+escapedLen(counter) > MaxKeyLen {
		sum := sha256.Sum256([]byte(counter))
		dst = append(dst, '#')
		return hex.AppendEncode(dst, sum[:])
	}
	dst = append(dst, ':')
	const digits = "0123456789ABCDEF"
	for i := 0; i < len(counter); i++ {
		b := counter[i]
		if keyByte(b) {
			dst = append(dst, b)
			continue
		}
		dst = append(dst, '%', digits[b>>4], digits[b&0xf])
	}
	return dst
}

// keyByte reports whether b stands for itself in a key: printable ASCII
// other than '%', which escapes.
func keyByte(b byte) bool { return b > ' ' && b < 0x7f && b != '%' }

// escapedLen returns the length of counter once escaped.
func escapedLen(counter string) int {
	n := len(counter)
	for i := 0; i < len(counter); i++ {
		if !keyByte(counter[i]) {
			n += 2
		}
	}
	return n
}

// validPrefix refuses a KeyPrefix longer than MaxPrefixLen or not
// printable ASCII without spaces.
func validPrefix(prefix string) error {
	if len(prefix) > MaxPrefixLen {
		return refused("KeyPrefix", prefix, fmt.Sprintf("%d bytes, longer than %d", len(prefix), MaxPrefixLen))
	}
	for i := 0; i < len(prefix); i++ {
		if b := prefix[i]; b <= ' ' || b >= 0x7f {
			return refused("KeyPrefix", prefix, fmt.Sprintf("holds byte %#x: Memcached keys take printable ASCII without spaces", b))
		}
	}
	return nil
}
