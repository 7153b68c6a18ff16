package main

import "github.com/urfave/cli/v3"

func lintCommand(g *globals) *cli.Command {
	return &cli.Command{Name: "lint", Usage: "(being written)"}
}
