"""The provider's connection types as README.md and docs/pipelines.md state them, made from what
``onceflow.provider.get_provider_info`` declares to Airflow. A test holds both pages to it;
``python -m onceflow_devkit.provider_doc`` writes them after the provider's list changes."""

from __future__ import annotations

import textwrap
from pathlib import Path

from onceflow.provider import get_provider_info
from onceflow_devkit import doc_blocks

ROOT = Path(__file__).resolve().parents[2]
BLOCK = "connection-types"
_NUMBERS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six"}


def connection_types() -> str:
    """The declared types in a phrase: "three connection types of its own: `a` (its hook's name), ..."."""
    declared = get_provider_info()["connection-types"]
    named = [f"`{entry['connection-type']}` ({entry['hook-name']})" for entry in declared]
    listed = named[0] if len(named) == 1 else f"{', '.join(named[:-1])} and {named[-1]}"
    count = _NUMBERS.get(len(named), str(len(named)))
    return f"{count} connection type{'s' if len(named) != 1 else ''} of its own: {listed}"


def readme_item() -> str:
    item = (f"- Airflow finds onceflow through its `apache_airflow_provider` entry point (`airflow providers list` "
            f"shows it), with {connection_types()}.")
    return textwrap.fill(item, width=100, subsequent_indent="  ", break_on_hyphens=False)


def pipelines_sentence() -> str:
    return textwrap.fill(f"onceflow registers {connection_types()}.", width=100, break_on_hyphens=False)


# page (from the repository's root): what its block holds
PAGES = {"README.md": readme_item, "docs/pipelines.md": pipelines_sentence}


if __name__ == "__main__":
    for page, make in PAGES.items():
        doc_blocks.write(ROOT / page, BLOCK, make())
    print(f"wrote {BLOCK} in {', '.join(PAGES)}")
