package handlers

import "github.com/wowd/wowd/handler"

func init() { Register(handler.Default()) }
