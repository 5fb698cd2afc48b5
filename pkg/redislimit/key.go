package redislimit

// Key returns the Redis key of counter (a limit.Hit.Key) under prefix
// (Options.KeyPrefix): prefix, then a Cluster hash tag of 16 hex digits of
// the counter's 64-bit FNV-1a hash in braces, then the counter itself.
//
// For a prefix without '{' or '}' the encoding is injective: the counter
// is everything after the first len(prefix)+18 bytes. The hash tag is the
// first braced part of the key, so Redis Cluster keeps a counter in one
// slot and spreads counters over all slots.
func Key(prefix, counter string) string {
	return string(appendKey(make([]byte, 0, len(prefix)+18+len(counter)), prefix, counter))
}

// appendKey appends Key(prefix, counter) to dst.
func appendKey(dst []byte, prefix, counter string) []byte {
	dst = append(dst, prefix...)
	dst = append(dst, '{')
	dst = appendHex64(dst, fnv1a64(counter))
	dst = append(dst, '}')
	return append(dst, counter...)
}

// fnv1a64 is the 64-bit FNV-1a hash: deterministic across processes and
// releases, unlike hash/maphash, so every instance computes the same tag.
func fnv1a64(s string) uint64 {
	const (
		offset = 14695981039346656037
		prime  = 1099511628211
	)
	h := uint64(offset)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= prime
	}
	return h
}

func appendHex64(dst []byte, v uint64) []byte {
	const digits = "0123456789abcdef"
	for shift := 60; shift >= 0; shift -= 4 {
		dst = append(dst, digits[(v>>uint(shift))&0xf])
	}
	return dst
}

// slot returns the Redis Cluster hash slot of Key(prefix, counter): CRC16
// of the hash tag, modulo 16384.
func slot(prefix, counter string) uint16 {
	var tag [16]byte
	appendHex64(tag[:0], fnv1a64(counter))
	return crc16(tag[:]) % 16384
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0), the checksum
// Redis Cluster maps keys to slots with.
func crc16(b []byte) uint16 {
	var crc uint16
	for _, c := range b {
		crc = crc<<8 ^ crc16Table[byte(crc>>8)^c]
	}
	return crc
}

var crc16Table = func() (t [256]uint16) {
	for i := range t {
		crc := uint16(i) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		t[i] = crc
	}
	return t
}()
