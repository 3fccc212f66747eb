#!/usr/bin/env python3
"""The user docs against the programs: every flag a program's --help prints is documented
in docs/config.md (groupsgdctl's in docs/operations.md), and every documented flag is in
--help. Usage: check_docs.py BIN_DIR DOCS_DIR"""
import re
import subprocess
import sys

FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


def section(text, title):
    """The lines of a '## title' section, up to the next '## ' heading."""
    m = re.search(r"^## " + re.escape(title) + r"\s*$(.*?)(?=^## |\Z)", text, re.M | re.S)
    if not m:
        sys.exit(f"check_docs: no section '## {title}'")
    return m.group(1)


def documented_flags(body):
    """Flags in code spans of table rows and of prose."""
    flags = set()
    for span in re.findall(r"`([^`]*)`", body):
        flags.update(FLAG.findall(span))
    return flags


def help_flags(program):
    out = subprocess.run([program, "--help"], capture_output=True, text=True, check=True).stdout
    # Option lines start with two blanks and the flag; prose mentions are not options.
    return {m.group(1) for m in re.finditer(r"^\s{2,}(?:-\w, )?(--[a-z][a-z0-9-]*)", out, re.M)}


def compare(name, in_help, in_docs, allowed_extra_docs=()):
    errors = []
    for f in sorted(in_help - in_docs):
        errors.append(f"{name}: {f} is in --help but not documented")
    for f in sorted(in_docs - in_help - set(allowed_extra_docs)):
        errors.append(f"{name}: {f} is documented but not in --help")
    return errors


def main():
    bin_dir, docs_dir = sys.argv[1], sys.argv[2]
    config = open(f"{docs_dir}/config.md", encoding="utf-8").read()
    operations = open(f"{docs_dir}/operations.md", encoding="utf-8").read()
    errors = []
    for title, program in [("groupsgdd", "daemon/groupsgdd"),
                           ("groupsgd-worker", "worker/groupsgd-worker"),
                           ("groupsgd-sim", "daemon/groupsgd-sim")]:
        errors += compare(title, help_flags(f"{bin_dir}/{program}"),
                          documented_flags(section(config, title)))
    ctl = section(operations, "groupsgdctl")
    ctl_docs = documented_flags(ctl)
    # Command flags (drain --wait, ...) appear in the commands table and in --help alike.
    ctl_help = subprocess.run([f"{bin_dir}/daemon/groupsgdctl", "--help"], capture_output=True,
                              text=True, check=True).stdout
    errors += compare("groupsgdctl", set(FLAG.findall(ctl_help)), ctl_docs)
    for e in errors:
        print(e)
    if errors:
        sys.exit(1)
    print("check_docs: --help and docs agree for groupsgdd, groupsgd-worker, groupsgd-sim, "
          "groupsgdctl")


if __name__ == "__main__":
    main()
