package main

import "github.com/urfave/cli/v3"

func patchCommand(g *globals) *cli.Command {
	return &cli.Command{Name: "patch", Usage: "(being written)"}
}

func autoPatchelfCommand(g *globals) *cli.Command {
	return &cli.Command{Name: "auto-patchelf", Usage: "(being written)"}
}
