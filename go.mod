module github.com/cudapatch/cudapatch

go 1.26
