package settings

import "slices"

// DefaultConfigPath is -config's default: ./config.
const DefaultConfigPath = "config"

// Table declares every setting of the binary, section by section, in the
// order of -h and docs/settings.md. Adding a setting is a row in its
// section (table_*.go) and the field it lands in.
var Table = slices.Concat(rulesRows, xdsRows,
	redisRows, perSecondRows, redisTLSRows, memcacheRows,
	listenerRows, grpcTLSRows, boundsRows, answerRows, rlqsRows,
	observeRows, tracingRows, captureRows, commandRows)

// section sets the section of -h, group, on each of rows.
func section(group string, rows []Setting) []Setting {
	for i := range rows {
		rows[i].Group = group
	}
	return rows
}

// groups are the sections of -h, in Table's order.
func groups() []string {
	var gs []string
	for _, s := range Table {
		if !slices.Contains(gs, s.Group) {
			gs = append(gs, s.Group)
		}
	}
	return gs
}
