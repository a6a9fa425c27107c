pytest_plugins = ["tests.fixtures.sim", "tests.fixtures.broker", "tests.fixtures.pipeline", "tests.fixtures.tiers",
                  "tests.fixtures.kafka", "tests.fixtures.faulted", "tests.fixtures.jobset",
                  "tests.fixtures.kueue"]
