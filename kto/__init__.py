"""kto: the command line. It wires the services, the local cluster and the benchmarks together."""
