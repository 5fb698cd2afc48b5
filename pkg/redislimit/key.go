package redislimit

// Key returns the Redis key of counter (a limit.Hit.Key) under prefix
// (Options.KeyPrefix): prefix, then a Cluster hash tag of 16 hex digits of
// the counter's 64-bit FNV-1a hash in braces, then the counter. For a
// prefix without '{' or '}' it is injective.
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

// fnv1a64 is the 64-bit FNV-1a hash, the same in every process, unlike
// hash/maphash.
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

// slot returns the Redis Cluster hash slot of Key(prefix, counter).
func slot(prefix, counter string) uint16 {
	var tag [16]byte
	appendHex64(tag[:0], fnv1a64(counter))
	return crc16(tag[:]) % 16384
}

// crc16 is CRC-16/XMODEM, the checksum of Redis Cluster's slots.
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
