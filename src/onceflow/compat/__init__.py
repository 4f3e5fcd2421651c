"""Old import paths: modules that moved between releases still import, or fail naming where they went
(``moved_modules``). Imports nothing of onceflow: the package face installs its finders first."""
