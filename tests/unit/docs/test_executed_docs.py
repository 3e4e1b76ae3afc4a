"""Executed docs: the commands of README.md and docs/first-install.md that need no host, run as a new user runs them.

A block of a doc is run when the line before its fence is ``<!-- executed-docs: run -->`` (``rc=N`` when the
documented command ends with that exit status, as the validation play on a fresh copy does). A block after
``<!-- executed-docs: output -->`` is what the run before it prints: each of its lines must match a line of that
output, in order, ``...`` standing for any text. The blocks that need the nodes (ssh-keyscan, site.yml for real,
detect.yml) carry no marker; the lab runs those.

Each doc runs in order in a sandbox laid out like the repository (ansible.cfg, site.yml, playbooks/, roles/, the
venv and the collection link, a real copy of inventory/example), from its root, as the docs say. Between the
sections the test fills in what the section tells the user to fill in (``FILLS``; each value is checked to be named
in that section, so a doc that stops telling it fails here). Two stand-ins, both what the docs offer the user:
the vault password comes from a file (``--ask-vault-pass`` becomes ``--vault-password-file FILE``, and
``ansible-vault`` is given the same option), and the worker tools archive of step 4, which needs GitHub, is the
lab's stub archive written where the step's ``--save-archive`` puts it.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from lab import tools_archive
from support.ansible_runner import REPO

from ansible_collections.pairserve.llm.plugins.module_utils import inventory_check  # noqa: E402

README = REPO / "README.md"
FIRST_INSTALL = REPO / "docs" / "first-install.md"
MARKER = re.compile(r"^<!-- executed-docs: (run|output)((?: [a-z]+=\S+)*) -->\s*$")
FENCE = re.compile(r"^```")
# What a sandbox links from the repository (read-only for the commands) and copies (inventory/example, which the
# docs copy from and which the commands must never change).
LINKED = ("ansible.cfg", "site.yml", "playbooks", "roles", "plugins", "meta", "galaxy.yml", ".venv", ".cache",
          "constraints.txt")
VAULT_PASSWORD = "executed-docs-vault-password"


class DocFailure(AssertionError):
    """A documented command failed or its documented output no longer matches."""


@dataclass
class Block:
    doc: Path
    line: int  # 1-based line of the fence
    section: str
    code: str
    rc: int = 0
    output: list = field(default_factory=list)


def parse(doc: Path):
    """[(section heading, section text, [Block])] in document order; a marker must sit right before a fence."""
    lines = doc.read_text().splitlines()
    sections, blocks, heading, start = [], [], "", 0
    i = 0

    def close(end):
        sections.append((heading, "\n".join(lines[start:end]), list(blocks)))
        blocks.clear()

    while i < len(lines):
        line = lines[i]
        if line.startswith("#") and not line.startswith("#!") and re.match(r"^#{1,6} ", line):
            close(i)
            heading, start = line.lstrip("#").strip(), i
            i += 1
            continue
        if FENCE.match(line):  # an unmarked block: skip to its end, so a '#' inside is no heading
            i += 1
            while i < len(lines) and not FENCE.match(lines[i]):
                i += 1
            i += 1
            continue
        marked = MARKER.match(line)
        if not marked:
            i += 1
            continue
        kind, opts = marked.group(1), dict(o.split("=", 1) for o in marked.group(2).split())
        j = i + 1
        while j < len(lines) and not lines[j].strip():
            j += 1
        if j >= len(lines) or not FENCE.match(lines[j]):
            raise DocFailure("%s:%d: marker %r is not followed by a code block" % (doc.name, i + 1, line))
        end = j + 1
        while end < len(lines) and not FENCE.match(lines[end]):
            end += 1
        body = lines[j + 1:end]
        if kind == "run":
            blocks.append(Block(doc, j + 1, heading, "\n".join(body) + "\n", rc=int(opts.get("rc", 0))))
        elif not blocks:
            raise DocFailure("%s:%d: an output block follows no run block of its section" % (doc.name, i + 1))
        else:
            blocks[-1].output = [b for b in body if b.strip()]
        i = end + 1
    close(len(lines))
    return sections


def sandbox(root: Path) -> Path:
    """A directory laid out like the repository root, as a user's checkout is, with its own inventory/."""
    root.mkdir(parents=True, exist_ok=True)
    for name in LINKED:
        (root / name).symlink_to(REPO / name)
    shutil.copytree(REPO / "inventory" / "example", root / "inventory" / "example", symlinks=False)
    (root / ".vault-pass").write_text(VAULT_PASSWORD + "\n")
    return root


def as_run(code: str, root: Path) -> str:
    """The block as the test runs it: the vault password from a file instead of a prompt (the docs' own
    alternative, --vault-password-file FILE)."""
    password = "--vault-password-file %s" % shlex.quote(str(root / ".vault-pass"))
    code = code.replace("--ask-vault-pass", password)
    return re.sub(r"\bansible-vault (encrypt_string|encrypt|view|edit|decrypt)\b", r"ansible-vault \1 " + password,
                  code)


def matches(documented, printed):
    """The documented lines that do not match the printed output, in order (``...`` = any text)."""
    out = [p.strip() for p in printed.splitlines()]
    missing, at = [], 0
    for line in documented:
        pattern = re.compile(".*".join(re.escape(part) for part in line.strip().split("...")))
        for k in range(at, len(out)):
            if pattern.fullmatch(out[k]):
                at = k + 1
                break
        else:
            missing.append(line)
    return missing


def run_block(block: Block, root: Path):
    env = dict(os.environ, PATH="%s:%s" % (REPO / ".venv" / "bin", os.environ.get("PATH", "")), ANSIBLE_NOCOLOR="1",
               ANSIBLE_FORCE_COLOR="0", HOME=str(root / "home"), PYTHONWARNINGS="ignore")
    for name in ("ANSIBLE_CONFIG", "ANSIBLE_VAULT_PASSWORD_FILE", "ANSIBLE_INVENTORY"):
        env.pop(name, None)  # a user's shell: ansible.cfg from the repository root, no password file
    (root / "home").mkdir(exist_ok=True)
    try:
        run = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", as_run(block.code, root)], cwd=root, env=env,
                             stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120, check=False)
    except subprocess.TimeoutExpired as err:
        raise DocFailure("%s:%d (%s): timed out (a prompt?):\n%s"
                         % (block.doc, block.line, block.section, block.code)) from err
    printed = run.stdout + run.stderr
    where = "%s:%d (section %r)" % (block.doc, block.line, block.section)
    if run.returncode != block.rc:
        raise DocFailure("%s: the documented command exited %d, the doc says %d:\n%s\n--- output ---\n%s"
                         % (where, run.returncode, block.rc, block.code, printed[-4000:]))
    missing = matches(block.output, printed)
    if missing:
        raise DocFailure("%s: the documented output no longer matches; not printed (in order): %s\n%s\n"
                         "--- output ---\n%s" % (where, missing, block.code, printed[-4000:]))
    return printed


# -- what the docs tell the user to fill in, by section ------------------------------------------------------------

def _set_vars(path: Path, values: dict):
    text = path.read_text()
    for name, value in values.items():
        text, count = re.subn(r"(?m)^%s:.*$" % re.escape(name), "%s: %s" % (name, value), text)
        assert count == 1, "%s does not set %s once (the docs tell the user to fill it in there)" % (path, name)
    path.write_text(text)


def fill_hosts(root: Path, section: str):
    assert "inventory/mysite/hosts.yml" in section and "ansible_host" in section
    hosts = root / "inventory" / "mysite" / "hosts.yml"
    text = hosts.read_text()
    for old, new in (("192.0.2.10", "198.51.100.10"), ("192.0.2.11", "198.51.100.11")):
        assert "ansible_host: %s" % old in text
        text = text.replace("ansible_host: %s" % old, "ansible_host: %s" % new)
    hosts.write_text(text)


PINS = {
    "pairserve_checkpoint_revision": '"%s"' % ("0123456789abcdef" * 3)[:40],
    "pairserve_runner_image_digest": '"sha256:%s"' % ("a" * 64),
    "pairserve_runtime_pause_image_digest": '"sha256:%s"' % ("b" * 64),
    "pairserve_runtime_health_image_digest": '"sha256:%s"' % ("c" * 64),
}


def fill_pins(root: Path, section: str):
    assert "inventory/mysite/group_vars/all/pins.yml" in section
    for name in PINS:
        assert "`%s`" % name in section, "step 2 no longer tells the user to fill in %s" % name
    _set_vars(root / "inventory" / "mysite" / "group_vars" / "all" / "pins.yml", PINS)


def fill_tools_archive(root: Path, section: str):
    """Step 4 needs GitHub: the lab's stub archive (scripts, valid for linux/amd64) where --save-archive puts it."""
    assert "--system linux --arch amd64" in section, "step 4 no longer builds the archive for the nodes' platform"
    saved = re.findall(r"--save-archive\s+(\S+)", section)
    assert len(saved) == 1, saved
    tools_archive.write("2.2.3", str(root / saved[0]))


FILLS = {
    "1. Make your inventory": fill_hosts,
    "2. Fill in the pins": fill_pins,
    "4. Stage the worker tools": fill_tools_archive,
}


def run_doc(doc: Path, root: Path, fills=None):
    """Run every marked block of ``doc`` in order in ``root``, filling in after each section what it tells the
    user to fill in. Returns {section: [output of each block]}."""
    printed = {}
    for heading, text, blocks in parse(doc):
        for block in blocks:
            printed.setdefault(heading, []).append(run_block(block, root))
        if heading in (fills or {}):
            fills[heading](root, text)
    return printed


# -- the tier -------------------------------------------------------------------------------------------------------

def test_every_marked_doc_has_blocks_to_run():
    for doc, least in ((README, 1), (FIRST_INSTALL, 6)):
        blocks = [b for _h, _t, bs in parse(doc) for b in bs]
        assert len(blocks) >= least, (doc, blocks)
    headings = [h for h, _t, _b in parse(FIRST_INSTALL)]
    assert set(FILLS) <= set(headings), "first-install.md lost a step the test fills in: %s" % (set(FILLS) - set(headings))


def test_readme_real_nodes_runs_as_written(tmp_path):
    printed = run_doc(README, sandbox(tmp_path))
    assert list(printed) == ["Real nodes"]
    assert "[WARNING]" not in printed["Real nodes"][0], printed
    # the copy is the user's; the tracked example stays as it was
    assert (tmp_path / "inventory" / "mysite" / "hosts.yml").read_text() == \
        (REPO / "inventory" / "example" / "hosts.yml").read_text()


def test_first_install_runs_as_written_and_its_inventory_passes_validation(tmp_path):
    root = sandbox(tmp_path)
    printed = run_doc(FIRST_INSTALL, root, FILLS)
    # the vault was written into the copy, never into the tracked example
    vault = root / "inventory" / "mysite" / "group_vars" / "all" / "vault.yml"
    assert set(yaml.safe_load(re.sub(r"!vault", "", vault.read_text()))) == set(inventory_check.VAULT_VARS.values())
    assert not (REPO / "inventory" / "example" / "group_vars" / "all" / "vault.yml").exists()
    assert "6. Run it" in printed and "Re-running one part" in printed
    # the documented commands print no warning a new user would have to wonder about
    assert not [o for outs in printed.values() for o in outs if "[WARNING]" in o], printed
    # The vault flag: without it, the validation play still reaches its list, naming the flag (not a decrypt error).
    forgot = Block(FIRST_INSTALL, 0, "without the vault password",
                   "ansible-playbook -i inventory/mysite playbooks/validate.yml\n", rc=2,
                   # a server-only secret: named on the server's host alone
                   output=["node-a: pairserve_gpustack_admin_password: is vaulted, and this run has no vault "
                           "password to read it: run again with --ask-vault-pass ..."])
    out = run_block(forgot, root)
    assert "Attempting to decrypt" not in out


def test_a_broken_copy_of_a_doc_fails_the_tier(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    # a documented command that no longer works: the module renamed under the doc's feet
    broken = docs / "first-install.md"
    broken.write_text(FIRST_INSTALL.read_text().replace("ansible-doc pairserve.llm.gpu_pairs\n",
                                                        "ansible-doc pairserve.llm.gpu_pairz\n", 1))
    with pytest.raises(DocFailure) as failed:
        run_doc(broken, sandbox(tmp_path / "a"), FILLS)
    assert "first-install.md" in str(failed.value) and "gpu_pairz" in str(failed.value)
    assert "the documented output no longer matches" in str(failed.value) or "exited" in str(failed.value)
    # documented output the command no longer prints: the README's validation list with a file renamed
    readme = tmp_path / "README.md"
    readme.write_text(README.read_text().replace("[fix in: group_vars/all/pins.yml]",
                                                 "[fix in: group_vars/all/versions.yml]", 1))
    with pytest.raises(DocFailure) as failed:
        run_doc(readme, sandbox(tmp_path / "b"))
    assert "no longer matches" in str(failed.value) and "versions.yml" in str(failed.value)
    # and a marker left without its block
    orphan = tmp_path / "orphan.md"
    orphan.write_text("## A\n<!-- executed-docs: run -->\ntext\n")
    with pytest.raises(DocFailure, match="not followed by a code block"):
        parse(orphan)


# -- the holes of the first install, each owned by a check ----------------------------------------------------------

def test_host_keys_are_scanned_by_the_addresses_ansible_connects_to():
    hosts = yaml.safe_load((REPO / "inventory" / "example" / "hosts.yml").read_text())
    addresses = {h["ansible_host"] for h in hosts["all"]["children"]["gpu_nodes"]["hosts"].values()}
    names = set(hosts["all"]["children"]["gpu_nodes"]["hosts"])
    for doc in (README, FIRST_INSTALL):
        scans = re.findall(r"ssh-keyscan (.+?) >>", doc.read_text())
        assert scans, doc
        for scan in scans:
            args = set(scan.split()) - {"<address", "of", "node-a>", "node-b>"}
            assert not args & names, "%s scans %s by name; Ansible connects to ansible_host" % (doc, scan)
            assert args <= addresses, (doc, scan)


def test_readme_names_the_first_install_steps_before_the_first_run():
    section = dict((h, t) for h, t, _b in parse(README))["Real nodes"]
    headings = [h for h, _t, _b in parse(FIRST_INSTALL)]
    for step in ("1. Make your inventory", "2. Fill in the pins", "3. Vault the secrets", "4. Stage the worker tools"):
        assert step in headings
        anchor = "first-install.md#" + re.sub(r"[^a-z0-9 -]", "", step.lower()).replace(" ", "-")
        assert anchor in section, "README's Real nodes does not link %s" % anchor
    assert section.index("#4-stage-the-worker-tools") < section.index("site.yml --ask-vault-pass")


def test_every_documented_run_that_reads_the_vault_gives_its_password():
    # site.yml, validate.yml and uninstall.yml read the vaulted secrets (README and first-install, after step 3)
    for doc in (README, FIRST_INSTALL):
        text = doc.read_text()
        # what runs once the vault exists: first-install from its step 3, README after it sends the user there
        after = text[text.find("## 3. Vault the secrets" if doc == FIRST_INSTALL else "Then follow"):]
        for line in _code_lines_of(after):
            if re.search(r"ansible-playbook .*(site\.yml|pairserve\.llm\.site|validate\.yml|uninstall\.yml)", line) \
                    and "--syntax-check" not in line:
                assert "--ask-vault-pass" in line or "--vault-password-file" in line, (doc, line)


def _code_lines_of(text):
    out, inside = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            inside = not inside
        elif inside:
            out.append(line)
    return out


# Commands of the example inventory's comments: each must be a command of the docs, character for character.
COMMAND = re.compile(r"^#\s{2,}((?:ansible-vault|docker|\.venv/bin/hf|hf|gpustack|pip|podman|python3)\b.*)$")


def test_the_example_inventorys_commands_are_the_docs_commands():
    docs = "\n".join(p.read_text() for p in [README, *sorted((REPO / "docs").glob("**/*.md"))])
    documented = {line.strip() for line in _code_lines_of(docs)}
    found = []
    for path in sorted((REPO / "inventory" / "example").rglob("*.yml")):
        for line in path.read_text().splitlines():
            command = COMMAND.match(line)
            if command:
                found.append(command.group(1))
                assert command.group(1).strip() in documented, "%s: %r is no command of the docs" % (path, line)
                assert "inventory/example" not in command.group(1), "%s writes into the tracked example" % path
    assert len(found) >= 6, found
    assert not any("--dry-run" in c or c.startswith("podman") for c in found), found


def test_where_to_fix_names_the_example_file_that_sets_each_variable():
    example = REPO / "inventory" / "example"
    for variable, where in inventory_check.FIX_IN.items():
        path = example / where.split(" (")[0]
        if variable in inventory_check.SECRET_VARS:
            # the vault file is the user's; control_plane.yml reads the vault variable it names
            control_plane = (example / "group_vars" / "all" / "control_plane.yml").read_text()
            assert "{{ %s }}" % inventory_check.VAULT_VARS[variable] in control_plane
            continue
        name = variable.split(".")[-1]
        assert path.is_file() and name in path.read_text(), (variable, where)


def test_docs_and_validation_agree_on_the_route_weights():
    # the docs promise: a host left out gets 50 ({} splits evenly); validation and the route role apply it
    from ansible_collections.pairserve.llm.plugins.module_utils import routes  # noqa: E402
    for doc in ("first-install.md", "serving-modes.md"):
        assert "gets 50" in (REPO / "docs" / doc).read_text()
    defaults = yaml.safe_load((REPO / "roles" / "route" / "defaults" / "main.yml").read_text())
    assert routes.weight_problems(defaults["pairserve_route_weights"], ["node-a", "node-b"]) == []
    assert routes.weight_problems({"node-a": 58}, ["node-a", "node-b"]) == []
    assert routes.DEFAULT_HOST_WEIGHT == 50
    assert "route_weight_problems" in (REPO / "roles" / "route" / "tasks" / "main.yml").read_text()
