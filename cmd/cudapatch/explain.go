package main

import "github.com/urfave/cli/v3"

func explainCommand(g *globals) *cli.Command {
	return &cli.Command{Name: "explain", Usage: "(being written)"}
}
