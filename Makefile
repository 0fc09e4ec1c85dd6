# The two commands of the README. Each sets itself up on first use (project-local .venv).
.PHONY: demo test bench setup clean

VENV ?= .venv
PY := $(VENV)/bin/python
export ROS_AUTOMATIC_DISCOVERY_RANGE ?= LOCALHOST

setup:
	@SIMREAL_VENV=$(VENV) scripts/bootstrap.sh

demo: setup
	@$(PY) -m simreal_ros.client.demo

test: setup
	@$(PY) -m pytest $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) build install log .pytest_cache .hypothesis
