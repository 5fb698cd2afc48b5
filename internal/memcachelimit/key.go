package memcachelimit

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
)

// MaxKeyLen is the longest key Memcached accepts, in bytes.
const MaxKeyLen = 250

// MaxPrefixLen is the longest key prefix (Options.KeyPrefix) New accepts:
// short enough that the hashed form of every key fits in MaxKeyLen.
const MaxPrefixLen = 128

// AppendKey appends to dst the Memcached key of the fixed window that
// starts at start (µs since the Unix epoch) of counter (a limit.Hit.Key)
// and returns the extended slice.
//
// The key is prefix, start in decimal, then ':' and counter with every
// byte that Memcached's text protocol cannot carry in a key (space and
// control characters, bytes above 0x7e) and '%' written as '%' and two
// upper-case hex digits. When that would be longer than MaxKeyLen, it is
// prefix, start, '#' and the hex SHA-256 of counter instead. For a fixed
// prefix the first form is injective (the first ':' or '#' after the
// prefix ends the digits, and the escaping is undone byte by byte), and
// the second collides only where SHA-256 does. The prefix must be valid
// (see validPrefix).
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

// validPrefix refuses, as Options.KeyPrefix, a prefix that is longer than
// MaxPrefixLen bytes or not printable ASCII without spaces: what a
// Memcached key may hold.
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
