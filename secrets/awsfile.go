package secrets

// AWSCredentialsFile is the $HOME-relative path of the AWS shared
// credentials file.
const AWSCredentialsFile = ".aws/credentials"

// AWSCredentialsFileFor renders, from a sandbox's placeholder environment
// (Placeholders), an AWS shared credentials file holding the same
// placeholders as its [default] profile, for tools that read the file and
// not the variables (a process started with a cleared environment, a
// profile-only SDK setup). ok is false when the environment has no AWS
// placeholders. The file holds placeholders only: the real keys stay at the
// gateway, and the placeholders are policed wherever they travel.
func AWSCredentialsFileFor(placeholders map[string]string) (data []byte, ok bool) {
	id, secret := placeholders[EnvAWSAccessKeyID], placeholders[EnvAWSSecretAccessKey]
	if id == "" || secret == "" {
		return nil, false
	}
	s := "[default]\naws_access_key_id = " + id + "\naws_secret_access_key = " + secret + "\n"
	if tok := placeholders[EnvAWSSessionToken]; tok != "" {
		s += "aws_session_token = " + tok + "\n"
	}
	return []byte(s), true
}
