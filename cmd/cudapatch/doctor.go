package main

import "github.com/urfave/cli/v3"

func doctorCommand(g *globals) *cli.Command {
	return &cli.Command{Name: "doctor", Usage: "(being written)"}
}
