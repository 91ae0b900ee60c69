# ---- system
# sshd for multi-node launches (mpi-operator v2 workers run `/usr/sbin/sshd -De`): host keys made at build, the
# privilege separation directory, pam_loginuid optional; the cluster-internal client does not ask about host keys.
RUN ssh-keygen -A \
 && mkdir -p /var/run/sshd \
 && if [ -f /etc/pam.d/sshd ]; then sed -i 's/^session\s*required\s*pam_loginuid.so/session optional pam_loginuid.so/' /etc/pam.d/sshd; fi \
 && printf '%s\n' 'Host *' '    StrictHostKeyChecking no' '    UserKnownHostsFile /dev/null' > /etc/ssh/ssh_config.d/efa-image-build.conf \
 && /usr/sbin/sshd -t
