module github.com/floodgate/floodgate

go 1.26
