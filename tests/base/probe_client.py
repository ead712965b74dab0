"""Drive a server over the OpenEnv WebSocket protocol with openenv-core's own client,
then print (as JSON) the observation texts and the distributions the client imported.

Usage: python probe_client.py BASE_URL
"""

from __future__ import annotations

import json
import sys

from openenv.core import GenericEnvClient
from probe_dists import loaded_distributions


def main(base_url: str) -> None:
    with GenericEnvClient(base_url=base_url).sync() as env:
        first = env.reset()
        second = env.step({"text": "hello"})
    print(
        json.dumps(
            {
                "reset": first.observation.get("echoed"),
                "step": second.observation.get("echoed"),
                "reward": second.reward,
                "done": second.done,
                "distributions": loaded_distributions(),
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1])
