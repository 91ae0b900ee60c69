"""Step 3, judge: facts in, checks, findings and a verdict out.

`verdict` decides (unknown never passes), `bandwidth` judges nccl-tests against the instance's profile
(`profiles`, its data in `profile_data`), `signatures` names the known failures; `shortlist` words the lists
findings carry.
"""
