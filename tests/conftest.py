pytest_plugins = ["tests.fixtures.sim", "tests.fixtures.broker"]
