module github.com/fabro-sh/fabro-go/cmd/fabro

go 1.26.8

require github.com/fabro-sh/fabro-go/gen v0.0.0

replace github.com/fabro-sh/fabro-go/gen => ../../gen
