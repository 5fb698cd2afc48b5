// Package livepage holds no code: its tests drive floodgate's live page
// (package ui) in headless Chromium through chromedp, against a server
// with traffic. They live in the examples module so that chromedp, a test
// dependency, stays out of the server's go.mod.
package livepage
