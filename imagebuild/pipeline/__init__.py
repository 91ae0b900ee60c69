"""The pipeline as functions: render -> build -> check -> push -> release (and bake beside build).

Each stage takes one typed options object and returns what it made; the commands in imagebuild/commands/
turn flags into these objects and results into exit codes, and nothing here reads argv. A stage calls the
one before it directly (build renders through `render` and builds exactly the folders it wrote), never
through the command line. Bad input is a UserError (exit 2), a refusal ChecksFailed (exit 1).

One module a stage (stage_render.py, stage_build.py with bake, stage_check.py, stage_push.py,
stage_attest.py with verify, stage_release.py, stage_fanin.py, stage_recipe.py; shared.py what several
share); every name the commands use is here, so they import `imagebuild.pipeline` alone.
"""

from __future__ import annotations

from imagebuild.pipeline.stage_attest import AttestRequest, VerifyRequest, attest, verify
from imagebuild.pipeline.stage_build import BakeRequest, BuildRequest, StageOptions, bake, build
from imagebuild.pipeline.stage_check import CheckRequest, Target, check, check_lines, check_targets
from imagebuild.pipeline.stage_fanin import FanInRequest, fan_in
from imagebuild.pipeline.stage_push import PushRequest, push
from imagebuild.pipeline.stage_recipe import RecipeRequest, recipe
from imagebuild.pipeline.stage_release import ReleaseRequest, release
from imagebuild.pipeline.stage_render import RenderOptions, Selection, render, rendered, rendered_dirs

__all__ = [
    "AttestRequest",
    "BakeRequest",
    "BuildRequest",
    "CheckRequest",
    "FanInRequest",
    "PushRequest",
    "RecipeRequest",
    "ReleaseRequest",
    "RenderOptions",
    "Selection",
    "StageOptions",
    "Target",
    "VerifyRequest",
    "attest",
    "bake",
    "build",
    "check",
    "check_lines",
    "check_targets",
    "fan_in",
    "push",
    "recipe",
    "release",
    "render",
    "rendered",
    "rendered_dirs",
    "verify",
]
