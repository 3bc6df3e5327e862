module sparkrun.dev/bench/loadgen

go 1.26
