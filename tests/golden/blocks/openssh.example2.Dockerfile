# ---- system
# sshd for multi-node launches, as mpi-operator's images set it up: port 2222 on both sides (with host
# networking, 22 is the host's own sshd), StrictModes off (the operator mounts its key Secret on .ssh), host keys
# made by each container when it starts (/usr/local/sbin/efa-sshd), never one set shared by every container of the image;
# the privilege separation directory, pam_loginuid optional; the cluster-internal client asks about no host key.
RUN mkdir -p /var/run/sshd \
 && rm -f /etc/ssh/ssh_host_* \
 && if [ -f /etc/pam.d/sshd ]; then sed -i 's/^session\s*required\s*pam_loginuid.so/session optional pam_loginuid.so/' /etc/pam.d/sshd; fi \
 && printf '%s\n' 'Port 2222' 'StrictModes no' > /etc/ssh/sshd_config.d/efa-image-build.conf \
 && printf '%s\n' 'Host *' '    Port 2222' '    StrictHostKeyChecking no' '    UserKnownHostsFile /dev/null' > /etc/ssh/ssh_config.d/efa-image-build.conf \
 && printf '%s\n' '#!/bin/sh' '# this container'"'"'s host keys, then sshd in the foreground (mpi-operator workers, a node of mpirun)' 'ssh-keygen -A >/dev/null' 'exec /usr/sbin/sshd -De "$@"' > /usr/local/sbin/efa-sshd \
 && chmod 0755 /usr/local/sbin/efa-sshd \
 && ssh-keygen -q -t ed25519 -N '' -f /tmp/sshd-check-key \
 && /usr/sbin/sshd -t -h /tmp/sshd-check-key \
 && /usr/sbin/sshd -T -h /tmp/sshd-check-key | grep -x 'port 2222' >/dev/null \
 && /usr/sbin/sshd -T -h /tmp/sshd-check-key | grep -x 'strictmodes no' >/dev/null \
 && rm -f /tmp/sshd-check-key /tmp/sshd-check-key.pub
