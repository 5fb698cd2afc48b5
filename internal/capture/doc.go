// Package capture records the requests a server serves, one JSON line
// each, for floodgate replay to rehearse a rule edit on them. Recorder
// wraps the service; a goroutine of its own writes the file, so that
// recording never makes a request wait.
package capture
