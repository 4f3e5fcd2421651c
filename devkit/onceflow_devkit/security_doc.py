"""docs/security.md's generated blocks: the ACL table (``onceflow.kafka.acls.ACLS``) and what
``onceflow acls`` prints for the clickstream example. A test holds the page to them;
``python -m onceflow_devkit.security_doc`` writes them after the table changes."""

from __future__ import annotations

from pathlib import Path

from onceflow.kafka.acls import ACLS, script
from onceflow_devkit import doc_blocks
from onceflow_examples.clickstream import CLICKSTREAM

PAGE = Path(__file__).resolve().parents[2] / "docs" / "security.md"


def acl_table() -> str:
    """``ACLS`` as a Markdown table, one row per row."""
    rows = ["| principal | operation | on the pipeline's | required | what for |", "| --- | --- | --- | --- | --- |"]
    rows += [f"| {a.principal.role} (`User:{a.principal.default_user}`) | {a.operation} | {a.of.value} | "
             f"{'yes' if a.required else 'no'} | {a.why} |" for a in ACLS]
    return "\n".join(rows)


def clickstream_acls() -> str:
    """``onceflow acls --pipeline clickstream``'s output, as a shell block."""
    return f"```sh\n{script(CLICKSTREAM.kafka_resources())}\n```"


BLOCKS = {"acl-table": acl_table, "acls-clickstream": clickstream_acls}


if __name__ == "__main__":
    for name, make in BLOCKS.items():
        doc_blocks.write(PAGE, name, make())
    print(f"wrote {', '.join(BLOCKS)} in {PAGE}")
