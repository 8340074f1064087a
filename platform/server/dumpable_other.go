//go:build !linux

package server

func nonDumpable() error { return nil }
